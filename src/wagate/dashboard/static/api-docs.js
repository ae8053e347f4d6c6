// wagate /docs and /redoc: starts Swagger UI or ReDoc (loaded before this file from /docs/assets) on
// the page's `#swagger-ui` or `#redoc` element, with the document this script's `data-openapi-url`
// names. Here and not inline, so that the pages' CSP allows scripts from this origin only. No build step.
"use strict";

(() => {
  const script = document.currentScript;
  const url = script.dataset.openapiUrl;
  const swagger = document.getElementById("swagger-ui");
  if (swagger && typeof window.SwaggerUIBundle === "function") {
    window.ui = window.SwaggerUIBundle({
      url,
      dom_id: "#swagger-ui",
      layout: "BaseLayout",
      presets: [window.SwaggerUIBundle.presets.apis],
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      // Swagger UI would show a badge fetched from validator.swagger.io: nothing from another origin.
      validatorUrl: null,
    });
  }
  const redoc = document.getElementById("redoc");
  if (redoc && window.Redoc) {
    // ReDoc's menu ends with Redocly's logo from cdn.redoc.ly, which the CSP refuses (an error in the
    // console on every visit): an image of another origin is given no address and hidden instead, so
    // the browser asks for nothing. ReDoc's React sets an image's address twice: the attribute, then
    // the property.
    const elsewhere = (value) => new URL(String(value), document.baseURI).origin !== window.location.origin;
    const setAttribute = Element.prototype.setAttribute;
    Element.prototype.setAttribute = function (name, value) {
      if (this instanceof HTMLImageElement && name === "src" && elsewhere(value)) {
        this.hidden = true;
        return;
      }
      setAttribute.call(this, name, value);
    };
    const src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
    Object.defineProperty(HTMLImageElement.prototype, "src", {
      ...src,
      set(value) {
        if (elsewhere(value)) {
          this.hidden = true;
          return;
        }
        src.set.call(this, value);
      },
    });
    // ReDoc draws with styled-components, which adds <style> elements: the page's CSP allows those
    // that carry this response's nonce (`style-src 'self' 'nonce-…'`), and ReDoc puts it on them.
    // The browser hides the nonce attribute from the DOM; the `nonce` property keeps it.
    window.Redoc.init(url, { nonce: script.nonce }, redoc);
  }
})();
