"""schemathesis hooks for lockstep's API (loaded through SCHEMATHESIS_HOOKS).

lockstep answers as milvus-backup does: a JSON body that breaks the request schema gets
HTTP 200 with `code: 400` in the envelope, and only a body that is not JSON gets HTTP 400
(the document says so). schemathesis's own `negative_data_rejection` knows only HTTP
statuses, so `run.sh` replaces it with this check: the same check, except that the
envelope's code 400 counts as the rejection it is. Anything else a schema-violating
request gets, a success above all, still fails.
"""

import json

import schemathesis
from schemathesis.specs.openapi.checks import negative_data_rejection


def envelope_code(response):
    if response.status_code != 200:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


@schemathesis.check
def negative_data_rejected_in_envelope(ctx, response, case):
    """A schema-violating request is refused: HTTP 4xx, or HTTP 200 with code 400."""
    if envelope_code(response) == 400:
        return None
    return negative_data_rejection(ctx, response, case)
