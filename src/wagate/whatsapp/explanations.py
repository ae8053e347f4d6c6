"""Meta's error codes explained for the people who answer customers: what happened, and what to do.

A failed message keeps Meta's code and title in ``external_error`` (``"131047: Re-engagement message"``);
the dashboard shows the explanation of that code beside it. ``cause`` is written for an agent, ``fix``
says what the agent, or the administrator who runs the gateway, can do about it. The class each code
raises in :mod:`wagate.whatsapp.errors` (what the gateway itself does: retry or give up) agrees with
these words; ``tests/whatsapp/test_error_explanations.py`` holds them together.

The facts come from Meta's error-code reference and from what users of Cloud API clients found the
codes to mean; the sentences are ours:

- Meta, "Error codes" (Cloud API):
  https://developers.facebook.com/documentation/business-messaging/whatsapp/support/error-codes
  (formerly https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes)
- Meta, per-user marketing template message limits (131049):
  https://developers.facebook.com/docs/whatsapp/api/messages/template/limits#per-user-marketing-template-message-limits
- pywa 4.5.0, ``pywa/errors.py`` (one class per code, with Meta's descriptions; a test dependency here)
- business-scoped user ids and 131062: https://dualhook.com/docs/contacts-bsuid-api-changes
- reports of what the codes meant in practice: chatwoot/chatwoot#12660 (131026 and 131049 between
  business numbers), chatwoot/chatwoot#12989 and #9708, shridarpatil/frappe_whatsapp#148 (190 after a
  temporary token expired), shridarpatil/whatomate#63 (131008 for an authentication template's button),
  tactilenews/100eyes#2148 (131050), gopherium/AlphOne#33 (131047 must lead to a template)
- help pages of WhatsApp providers restating Meta's table: https://niswey.com/knowledge-base/error-codes-meta,
  https://help.chakrahq.com/chat/faqs/whatsapp-api-error-code-troubleshooting/whatsapp-api-message-delivery-errors,
  https://chatondesk.com/per-user-marketing-template-message-limits,
  https://heltar.com/blogs/how-to-resolve-whatsapp-business-api-error-code-131056-pair-rate-limit-hit-cm3kmbksu000xvnqr4ql87km1,
  https://www.achieveapex.com/docs/error-codes/whatsapp/131042
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Explanation:
    code: int
    title: str
    cause: str
    fix: str


# In the fix of each code the gateway retries (ThrottlingError in errors.py), and only there.
RETRIED = "When Meta refused it at once, the gateway already tried again for a while before giving up."
_RENEW_ACCESS = (
    "Administrator: put a valid access token in the channel's access_token (a system user's token, "
    "with the whatsapp_business_messaging and whatsapp_business_management permissions) and run "
    "`wagate provision` with the file again."
)
_SYNC = "Administrator: `wagate templates sync` fetches the templates as Meta has them now."

_TABLE: tuple[tuple[int, str, str, str], ...] = (
    # --- the customer or the 24-hour window -------------------------------------------------------
    (
        131026,
        "Message undeliverable",
        "WhatsApp could not deliver the message to this customer and does not say why, to protect "
        "their privacy. Usual reasons: the number has no WhatsApp account, the customer has not "
        "accepted WhatsApp's current terms, or their app is too old. Users have also seen it for "
        "numbers that belong to another business on the WhatsApp Business Platform.",
        "Check that the number is right and uses WhatsApp (ask the customer by another channel, and "
        "ask them to update WhatsApp). Sending it again unchanged will usually fail the same way. If the "
        "customer writes to you, you can answer them.",
    ),
    (
        131047,
        "24-hour window closed",
        "The customer has not written in the last 24 hours, so WhatsApp only lets the business send "
        "approved templates, not free text.",
        "Send an approved template instead. When the customer replies, free text is allowed again for "
        "24 hours from their message.",
    ),
    (
        131049,
        "Held back by Meta: too many marketing messages",
        "Meta chose not to deliver this marketing template. It limits how many marketing templates a "
        "person receives from all businesses together, and this customer has reached that limit for "
        "now. The limit is not published and changes with how the customer engages. Nothing is wrong "
        "with the account, the number or the template.",
        "Do not send it again right away: it will be held back again. Try later, waiting a day or more, "
        "and longer each time. Once the customer writes to you, you can answer them freely. Utility "
        "and authentication templates do not count towards this limit.",
    ),
    (
        131050,
        "Customer stopped marketing messages",
        "The customer chose in WhatsApp to stop receiving marketing messages from this business.",
        "Do not send them marketing templates. Utility and authentication templates still reach them, "
        "and you can answer freely when they write. They can turn marketing messages back on themselves "
        "in WhatsApp.",
    ),
    (
        131021,
        "Sent to the business's own number",
        "The customer's number is the same as the business number the message was sent from.",
        "Check the customer's number: a business number cannot message itself.",
    ),
    (
        131030,
        "Number not on the test allow list",
        "The business number is a Meta test number, which can only message up to five numbers added "
        "to its allow list.",
        "Administrator: add this number to the test number's recipients in the Meta app dashboard, or "
        "send from a registered production number.",
    ),
    (
        131062,
        "Needs a phone number, not a user id",
        "This customer is known only by their WhatsApp user id (they use a username), and this kind of "
        "message, an authentication template (copy-code, one-tap or zero-tap), must be sent to a phone "
        "number.",
        "Send it to the customer's phone number if you have it, or use another way to give them the "
        "code. Other templates and free text can be sent to the user id.",
    ),
    (
        130472,
        "Held back by a Meta experiment",
        "The customer's number is part of a Meta experiment in which some marketing messages are not "
        "delivered.",
        "Nothing to fix on our side. Reach the customer another way, or try again another time.",
    ),
    # --- pacing and limits ---------------------------------------------------------------------------
    (
        131056,
        "Too many messages to this customer",
        "Too many messages went from this business number to this same customer in a short time "
        "(roughly one every six seconds is allowed over time).",
        "Wait a little and send again, and say more in fewer messages. Other customers are not "
        "affected. " + RETRIED,
    ),
    (
        130429,
        "Sending too fast",
        "The business number sent more messages per second than Meta allows it (its throughput).",
        "Send again in a moment. " + RETRIED + " If it keeps happening, the administrator lowers "
        "the channel's messages_per_second in the provisioning file to what Meta allows this number.",
    ),
    (
        131048,
        "Limited for spam reports",
        "Meta restricts how many messages this business number may send, because too many recent "
        "messages were blocked or reported as spam by the people who received them.",
        "Send only to customers who asked to hear from you, and less often. " + RETRIED + " "
        "Administrator: check the number's quality rating in WhatsApp Manager; the limit eases as "
        "quality recovers.",
    ),
    (
        4,
        "Too many API calls",
        "The app that the gateway uses has made more calls to Meta's API than its rate limit allows.",
        "Send again later. " + RETRIED + " Administrator: check the app's rate limit in the Meta app "
        "dashboard if it keeps happening.",
    ),
    (
        80007,
        "Account rate limit reached",
        "The WhatsApp Business Account has reached its limit of API calls for now.",
        "Send again later. " + RETRIED + " Administrator: spread large sends over more time.",
    ),
    # --- templates -----------------------------------------------------------------------------------
    (
        132000,
        "Wrong number of template values",
        "The number of values sent does not match the number of variables in the approved template. "
        "Usually the template was changed in WhatsApp Manager after the gateway last fetched it.",
        "Fill in each of the template's variables, no more and no fewer, and send again. " + _SYNC,
    ),
    (
        132001,
        "Template not found",
        "WhatsApp has no approved template with this name in this language: it may be misspelled, "
        "deleted, not approved yet, or approved in another language only.",
        "Pick a template from the list. " + _SYNC + " Check in WhatsApp Manager that the template is "
        "approved in this language.",
    ),
    (
        132005,
        "Template text too long",
        "With the values filled in, the template's text is longer than WhatsApp allows.",
        "Send again with shorter values.",
    ),
    (
        132007,
        "Template breaks WhatsApp's content rules",
        "WhatsApp found that the template's content, with the values filled in, breaks one of its "
        "content or formatting rules.",
        "Try again with plain, short values (no line breaks or tabs, nothing that reads like a whole "
        "message). If it fails whatever the values, the administrator rewords the template in WhatsApp "
        "Manager and has it approved again.",
    ),
    (
        132012,
        "Template values in the wrong form",
        "A value is not in the form the template expects in its place, for example text given where "
        "the template's header is an image.",
        "Send again with values of the right kind for each variable. " + _SYNC,
    ),
    (
        132015,
        "Template paused",
        "Meta paused this template because customers reacted badly to it (blocked or reported it), so "
        "it cannot be sent for now.",
        "Use another template. Administrator: edit the template in WhatsApp Manager to improve it, or "
        "wait for the pause to end.",
    ),
    (
        132016,
        "Template disabled",
        "Meta disabled this template for good after pausing it too many times for low quality.",
        "Use another template. Administrator: create a new, better-received template in its place.",
    ),
    (
        132068,
        "Flow blocked",
        "The WhatsApp Flow this message uses is blocked.",
        "Administrator: fix the Flow in WhatsApp Manager, or send a message without it.",
    ),
    (
        132069,
        "Flow throttled",
        "The WhatsApp Flow this message uses is throttled: it was already sent ten times in the last hour.",
        "Send it later. Administrator: fix the Flow's health in WhatsApp Manager.",
    ),
    # --- the request ---------------------------------------------------------------------------------
    (
        131008,
        "Required value missing",
        "Something the message needs was not in it, for example a template's button value (an "
        "authentication template's copy-code button needs the code).",
        "Fill in every value the template asks for and send again. If it keeps failing, tell the "
        "administrator: the details are in the gateway's log.",
    ),
    (
        131009,
        "Value not valid",
        "A value in the message is not acceptable to WhatsApp, for example a phone number or user id "
        "in the wrong form.",
        "Check the customer's number (with its country code) and the values you sent, then send again.",
    ),
    (
        100,
        "Invalid parameter",
        "The request to Meta had a parameter it does not accept, or one misspelled or with a wrong value.",
        "Check the values you sent. If they are right, tell the administrator: the gateway may be "
        "sending something Meta no longer accepts.",
    ),
    (
        33,
        "Business number not found",
        "The business phone number this channel sends from does not exist any more (it was deleted).",
        "Administrator: check the channel's phone number id in the provisioning file.",
    ),
    (
        131051,
        "Message type not supported",
        "WhatsApp does not support this type of message here. It also appears on messages from a "
        "customer that WhatsApp does not pass on to businesses.",
        "Send the content another way, as text or a template. If a customer's message arrived as "
        "unsupported, ask them to send it again as text.",
    ),
    (
        131052,
        "Customer's media could not be downloaded",
        "A photo, video or file the customer sent could not be fetched from WhatsApp.",
        "Ask the customer to send it again.",
    ),
    (
        131053,
        "Media could not be uploaded",
        "The media for this message could not be uploaded to WhatsApp, for example because its type "
        "is not supported or its file is too large.",
        "Send the media in a common format and a smaller size, or send a link instead.",
    ),
    # --- the business account --------------------------------------------------------------------------
    (
        131031,
        "Business account locked",
        "Meta locked the WhatsApp Business Account: for breaking a WhatsApp policy, or because data "
        "it checks (such as the number's two-step verification PIN) did not match.",
        "Administrator: look for a violation in Meta Business Support Home and request a review, or "
        "register the number again with the right PIN. Nothing can be sent until the lock is lifted.",
    ),
    (
        131042,
        "Billing problem",
        "The WhatsApp Business Account has a payment problem: no valid payment method, a credit line "
        "used up, or billing settings incomplete.",
        "Administrator: fix the payment settings of the WhatsApp Business Account in Meta Business "
        "Manager; messages go out again once billing is in order.",
    ),
    (
        131045,
        "Number registration problem",
        "Meta refused the send because the business phone number's registration is not in order (its "
        "certificate is missing or wrong, usually after a migration or an unfinished registration).",
        "Administrator: register the number again in WhatsApp Manager (or through the /register call "
        "with its PIN). The gateway pauses the channel meanwhile and resumes it once Meta takes a send.",
    ),
    (
        131037,
        "Display name not approved",
        "The business number has no approved display name yet, so it may not send this message.",
        "Administrator: get the number's display name approved in WhatsApp Manager.",
    ),
    (
        131057,
        "Business account in maintenance",
        "The WhatsApp Business Account is in maintenance mode for now.",
        "Send again later, once the maintenance has ended.",
    ),
    (
        133010,
        "Business number not registered",
        "The business phone number is not registered on the WhatsApp Business Platform, so it cannot send.",
        "Administrator: register the number with the Cloud API (in WhatsApp Manager, or with its "
        "register call) and check the channel's phone number id.",
    ),
    (
        368,
        "Blocked for policy violations",
        "Meta restricted or disabled the WhatsApp Business Account for breaking a platform policy.",
        "Administrator: see the violation in Meta Business Support Home, fix what it names, and "
        "request a review if you disagree.",
    ),
    (
        130497,
        "Country not allowed",
        "This WhatsApp Business Account may not message people in the customer's country.",
        "Reach the customer another way. Administrator: see WhatsApp's business policy for the "
        "countries allowed for the business's category.",
    ),
    # --- access token and permissions ------------------------------------------------------------------
    (
        190,
        "Access token expired",
        "The access token the gateway uses for this WhatsApp number has expired or was revoked, so Meta "
        "refuses every message from it. The temporary tokens shown in Meta's app dashboard expire "
        "after about a day.",
        _RENEW_ACCESS,
    ),
    (
        0,
        "Could not authenticate",
        "Meta could not authenticate the gateway: its access token has expired or was invalidated.",
        _RENEW_ACCESS,
    ),
    (
        3,
        "Capability or permission missing",
        "The app the gateway uses does not have the capability or permission this call needs.",
        "Administrator: check the token in Meta's access token debugger for the "
        "whatsapp_business_messaging and whatsapp_business_management permissions.",
    ),
    (
        10,
        "Permission denied",
        "The access token has not been granted the permission this needs, or it was taken away.",
        _RENEW_ACCESS,
    ),
    (
        200,
        "Permission missing",
        "The access token lacks a permission needed for this, or it was removed.",
        _RENEW_ACCESS,
    ),
    (
        131005,
        "Access denied",
        "The access token does not have permission to send for this number, or the permission was removed.",
        _RENEW_ACCESS,
    ),
    # --- Meta's side -----------------------------------------------------------------------------------
    (
        131000,
        "Something went wrong at Meta",
        "The message failed because of an unknown error at Meta.",
        "Send it again. If it keeps failing, the administrator checks the WhatsApp Business Platform "
        "status page (metastatus.com).",
    ),
    (
        131016,
        "WhatsApp temporarily unavailable",
        "A WhatsApp service was temporarily unavailable.",
        "Send it again in a little while.",
    ),
    (
        135000,
        "Unknown error",
        "Meta refused something in the message's contents without saying what.",
        "Send it again, simplified (plain text or another template). If it keeps failing, tell the "
        "administrator: the details are in the gateway's log.",
    ),
    (
        1,
        "Unknown API error",
        "Meta could not handle the request: it was not accepted, or Meta had a problem.",
        "Send it again. If it keeps failing, the administrator checks the WhatsApp Business Platform "
        "status page (metastatus.com).",
    ),
    (
        2,
        "WhatsApp service busy",
        "Meta's service was down or overloaded for a moment.",
        "Send it again in a little while.",
    ),
)

EXPLANATIONS: dict[int, Explanation] = {row[0]: Explanation(*row) for row in _TABLE}

# Meta gives all of 200-299 one meaning ("API Permission").
_PERMISSION_RANGE = range(200, 300)

_LEADING_CODE = re.compile(r"\s*(\d+)(?!\d)")


def explain(code: int) -> Explanation | None:
    """The explanation of Meta's error ``code``; ``None`` for a code not explained here."""
    found = EXPLANATIONS.get(code)
    if found is None and code in _PERMISSION_RANGE:
        base = EXPLANATIONS[_PERMISSION_RANGE.start]
        return Explanation(code, base.title, base.cause, base.fix)
    return found


def code_of(external_error: str | None) -> int | None:
    """Meta's code at the start of a stored ``external_error`` (``"131026: Message undeliverable"``).

    Only a leading integer is a code: our own reasons (``"upstream_unconfirmed: ..."``,
    ``"expired: ..."``, ``"marketing_preference_stopped"``) have none."""
    if not external_error:
        return None
    match = _LEADING_CODE.match(external_error)
    return int(match.group(1)) if match else None


def explain_external_error(external_error: str | None) -> Explanation | None:
    """The explanation for a message's stored ``external_error``, if it carries a code explained here."""
    code = code_of(external_error)
    return None if code is None else explain(code)
