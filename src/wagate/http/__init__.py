"""The HTTP toolkit every endpoint uses: request limits and id types, the OpenAPI error documentation,
fast JSON responses, the uvicorn server. Imports only `wagate.core`."""
