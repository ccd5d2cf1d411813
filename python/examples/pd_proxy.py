"""Prefill/decode disaggregation through kvtierd: a small OpenAI-compatible proxy in
front of a prefill instance and a decode instance of ``vllm serve``.

For each POST /v1/completions or /v1/chat/completions the proxy

1. sends the request to the prefill instance with one token to generate
   (``max_tokens`` 1, and ``max_completion_tokens`` 1 for chat) and ``stream``
   false: it computes the prompt and its kvtier connector (``kv_producer``)
   stores the prompt's full blocks into kvtierd; its response carries
   ``kv_transfer_params: {"kvtier_prompt_blocks": N}``, the blocks it stored;
2. sends the original request, with those ``kv_transfer_params`` added to its
   body, to the decode instance, whose connector (``kv_consumer``) waits for
   the N blocks to land in kvtierd (up to ``producer_wait_s``) and loads them
   instead of recomputing the prompt;
3. returns the decode instance's response, streamed through when the client
   asked to stream.

GET /v1/models and /health go to the decode instance. An error from either
instance comes back to the client with its status and body; an instance that
cannot be reached is a 502.

One node, one kvtierd shared by both instances::

    kvtierd --socket /run/kvtier/kvtierd.sock --host-capacity 64GiB &
    vllm serve MODEL --port 8100 --kv-transfer-config '{"kv_connector":"KvtierConnector",
        "kv_connector_module_path":"kvtier.vllm","kv_role":"kv_producer",
        "kv_connector_extra_config":{"socket":"/run/kvtier/kvtierd.sock"}}' &
    vllm serve MODEL --port 8200 --kv-transfer-config '{"kv_connector":"KvtierConnector",
        "kv_connector_module_path":"kvtier.vllm","kv_role":"kv_consumer",
        "kv_connector_extra_config":{"socket":"/run/kvtier/kvtierd.sock"}}' &
    python python/examples/pd_proxy.py --prefill http://127.0.0.1:8100 \
        --decode http://127.0.0.1:8200 --port 8000

(on a GPU node give the two instances different devices, e.g.
``CUDA_VISIBLE_DEVICES``). Clients talk to port 8000 as to any vLLM.

Across nodes, each instance attaches to its own node's kvtierd and the two
kvtierds share a Redis Cluster remote tier (docs/operations.md, "Several
nodes: the remote tier"), with write-through so that the decode node finds a
block as soon as the prefill node committed it, and the same deployment
secret on both::

    kvtierd --socket /run/kvtier/kvtierd.sock --host-capacity 64GiB \
        --remote-seeds h1:7000,h2:7000,h3:7000 \
        --remote-secret-file /etc/kvtier/deployment.secret --remote-write-through

(or ``[remote]`` with ``seeds``, ``secret_file`` and ``write_through = true`` in
kvtierd.toml). The proxy runs anywhere both instances can be reached; docs/vllm-pd.md
describes the whole arrangement.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web

logger = logging.getLogger("pd_proxy")

# Headers passed on to the instances (an --api-key's Authorization among them).
FORWARDED = ("Authorization", "X-Request-Id")


def error(status: int, message: str) -> web.Response:
    """An OpenAI-style error body."""
    return web.json_response({"error": {"message": message, "type": "proxy_error",
                                        "code": status}}, status=status)


def passed_back(status: int, body: bytes, content_type: str) -> web.Response:
    return web.Response(status=status, body=body, content_type=content_type)


class Proxy:
    def __init__(self, prefill: str, decode: str) -> None:
        self.prefill = prefill.rstrip("/")
        self.decode = decode.rstrip("/")
        self.session: ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        # No overall timeout: a long generation streams for as long as it takes.
        self.session = ClientSession(timeout=ClientTimeout(total=None, sock_connect=10))

    async def stop(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def app(self) -> web.Application:
        app = web.Application()
        app.on_startup.append(self.start)
        app.on_cleanup.append(self.stop)
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_get("/v1/models", self.pass_through)
        app.router.add_get("/health", self.pass_through)
        return app

    async def pass_through(self, request: web.Request) -> web.Response:
        assert self.session is not None
        try:
            async with self.session.get(self.decode + request.path,
                                        headers=self._headers(request)) as r:
                return passed_back(r.status, await r.read(), r.content_type)
        except ClientError as e:
            return error(502, f"decode instance {self.decode}: {e}")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body is not JSON")
        if not isinstance(body, dict):
            return error(400, "the request body is not a JSON object")
        headers = self._headers(request)

        # 1. The prefill: the prompt, one token, no streaming.
        prefill = dict(body, max_tokens=1, stream=False, n=1)
        if request.path == "/v1/chat/completions":
            prefill["max_completion_tokens"] = 1
        for key in ("stream_options", "min_tokens", "kv_transfer_params"):
            prefill.pop(key, None)
        try:
            async with self.session.post(self.prefill + request.path, json=prefill,
                                         headers=headers) as r:
                if r.status != 200:
                    return passed_back(r.status, await r.read(), r.content_type)
                answer = await r.json()
        except (ClientError, ValueError) as e:
            return error(502, f"prefill instance {self.prefill}: {e}")
        params = answer.get("kv_transfer_params")
        logger.info("%s: prefill done, kv_transfer_params %s", request.path, json.dumps(params))

        # 2. The decode: the original request, told what the prefill stored.
        decode = dict(body)
        if params:
            decode["kv_transfer_params"] = params
        out: web.StreamResponse | None = None
        try:
            async with self.session.post(self.decode + request.path, json=decode,
                                         headers=headers) as r:
                if r.status != 200 or not body.get("stream"):
                    return passed_back(r.status, await r.read(), r.content_type)
                # 3. Streamed through as it comes (server-sent events).
                out = web.StreamResponse(status=r.status)
                out.content_type = r.content_type
                await out.prepare(request)
                async for chunk in r.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except ClientError as e:
            if out is not None:
                raise  # mid-stream: nothing left to do but drop the connection
            return error(502, f"decode instance {self.decode}: {e}")

    @staticmethod
    def _headers(request: web.Request) -> dict[str, str]:
        return {k: request.headers[k] for k in FORWARDED if k in request.headers}


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefill", required=True, help="the kv_producer instance, http://HOST:PORT")
    ap.add_argument("--decode", required=True, help="the kv_consumer instance, http://HOST:PORT")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logger.info("prefill %s, decode %s", args.prefill, args.decode)
    web.run_app(Proxy(args.prefill, args.decode).app(), host=args.host, port=args.port,
                print=lambda msg: logger.info("%s", msg))


if __name__ == "__main__":
    main()
