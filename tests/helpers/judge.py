"""A fake OpenAI-compatible judge server on localhost for the judge tests (a few lines of http.server)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeJudgeServer:
    """/v1/models and /v1/chat/completions on localhost. ``mode``: "grade" answers BASHY when the
    prompt's solution says "every pair", else ELEGANT (or what ``verdict(prompt)`` says); "error"
    answers 500; "hang" never answers. ``requests`` holds every completion request's body."""

    def __init__(self, mode: str = "grade", verdict=None):
        self.mode, self.requests, self.release = mode, [], threading.Event()
        self.verdict = verdict or (lambda prompt: "BASHY" if "every pair" in prompt else "ELEGANT")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "fake-judge", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if outer.mode == "hang":
                    outer.release.wait(30)
                    return
                if outer.mode == "error":
                    return self._send(500, {"error": {"message": "boom"}})
                prompt = body["messages"][-1]["content"]
                verdict = outer.verdict(prompt)
                self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": f"Reasoning.\n{verdict}"}}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
