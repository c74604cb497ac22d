"""Stream tees for gateways: publish tool-call fragments straight from a provider SDK's stream.

``tee_stream`` (async) and ``tee_stream_sync`` (:mod:`processor.integrations.tee`) yield every
provider event unchanged, so text can still stream to the user, and publish the normalised
fragment events on the side through the pure adapters of :mod:`processor.adapters`. One module
per SDK knows how that SDK's event objects become the provider's wire dict:

* :mod:`processor.integrations.openai` — ``ChatCompletionChunk`` and Responses stream events;
* :mod:`processor.integrations.anthropic` — ``RawMessageStreamEvent`` / ``MessageStreamEvent``;
* :mod:`processor.integrations.google_genai` — ``GenerateContentResponse`` chunks;
* :mod:`processor.integrations.boto3` — ``converse_stream()`` event dicts;
* :mod:`processor.integrations.httpx` — a raw ``httpx`` response (SSE or eventstream bytes).

The SDKs are optional extras (``pip install 'toolcall-processor[sdk]'``); nothing here imports
one at module level.
"""
