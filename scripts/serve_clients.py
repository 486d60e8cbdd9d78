"""Drive a running `specula serve` with the real `openai` and `ollama` clients.

Run by cmd/specula's TestServeRealClients (make test) in the environment that
scripts/pyclients.sh makes. The Go test starts the server on a test model and
computes reference outputs with `specula run`; this script checks that every
way of asking gives those outputs, that errors, the queue, disconnects,
keep_alive and the prompt cache behave, and prints one JSON line of load-test
measurements ("load: {...}") for docs/PERFORMANCE.md.

    python serve_clients.py --url http://127.0.0.1:PORT --model NAME --refs refs.json
    python serve_clients.py --url ... --model NAME --refs refs.json --completion-only

--completion-only runs the checks a base model without a chat template can
answer (listing, raw generation and completions, stream and not, and real
acceptance reported by the server's speculation extension); refs.json then
needs only "raw_prompt", "raw_text", "raw_tokens" and "max_tokens".

refs.json: {"raw_prompt", "raw_text", "system", "user", "chat_text",
"max_tokens", "load_prompts": [...], "max_queue", "long_prompt"}. Exit status 0 when every
check passed; the last line is "N passed, N failed".
"""

import argparse
import concurrent.futures
import json
import statistics
import sys
import threading
import time
import traceback

import httpx
import ollama
import openai

RESULTS = {"passed": 0, "failed": 0}


def check(name):
    """Decorator: run a check, count it, print its outcome."""

    def wrap(fn):
        def run(*args):
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - every failure is reported
                RESULTS["failed"] += 1
                print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
            else:
                RESULTS["passed"] += 1
                print(f"ok   {name}", flush=True)

        return run

    return wrap


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


class Suite:
    def __init__(self, url, model, refs):
        self.url, self.model, self.refs = url, model, refs
        self.n = refs["max_tokens"]
        self.ol = ollama.Client(host=url)
        self.oa = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        self.http = httpx.Client(base_url=url, timeout=60)
        self.greedy = {"temperature": 0, "num_predict": self.n}
        self.messages = [
            {"role": "system", "content": refs["system"]},
            {"role": "user", "content": refs["user"]},
        ]

    def metrics(self):
        # A connection of its own, closed at once, so that it leaves no
        # server goroutine behind.
        text = httpx.get(self.url + "/metrics", timeout=30).text
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def metric(self, name):
        m = self.metrics()
        return m.get(f'{name}{{model_name="{self.model}"}}', m.get(name, 0.0))

    # ---- ollama -------------------------------------------------------
    @check("ollama list, show, ps, version")
    def ollama_listing(self):
        names = [m.model for m in self.ol.list().models]
        expect(self.model in names, f"list: {names}")
        show = self.ol.show(self.model)
        expect(show.details.format == "safetensors", f"show: {show}")
        expect("im_start" in (show.template or ""), "show: no chat template")
        expect(self.http.get("/api/version").json()["version"], "version")
        self.ol.ps()  # parses

    @check("ollama generate raw: stream and not, equal to specula run")
    def ollama_generate_raw(self):
        r = self.ol.generate(model=self.model, prompt=self.refs["raw_prompt"], raw=True, options=self.greedy)
        expect(r.response == self.refs["raw_text"], f"non-stream {r.response!r} != {self.refs['raw_text']!r}")
        expect(r.done and r.done_reason in ("length", "stop"), f"done_reason {r.done_reason}")
        expect(r.eval_count == self.refs["raw_tokens"], f"eval_count {r.eval_count}")
        expect(r.total_duration > 0 and r.eval_duration > 0 and r.prompt_eval_duration > 0, "durations")
        expect(r.prompt_eval_count >= 1, f"prompt_eval_count {r.prompt_eval_count}")
        expect(r.context is None, "context with raw")
        parts, final = [], None
        for c in self.ol.generate(model=self.model, prompt=self.refs["raw_prompt"], raw=True, options=self.greedy, stream=True):
            if c.done:
                final = c
            parts.append(c.response)
        expect("".join(parts) == self.refs["raw_text"], f"stream {''.join(parts)!r}")
        expect(final is not None and final.eval_count == self.refs["raw_tokens"], f"final {final}")

    @check("ollama generate with system (chat template) equal to specula run --chat, context returned")
    def ollama_generate_templated(self):
        r = self.ol.generate(model=self.model, prompt=self.refs["user"], system=self.refs["system"], options=self.greedy)
        expect(r.response == self.refs["chat_text"], f"{r.response!r} != {self.refs['chat_text']!r}")
        # context is the prompt's ids then the answer's; prompt_eval_count
        # counts the prompt tokens evaluated, not those the prompt cache held
        # (ollama's meaning).
        expect(r.context and len(r.context) - r.eval_count >= r.prompt_eval_count >= 1, f"context {len(r.context or [])}, {r}")

    @check("ollama chat: stream and not, options, equal to specula run --chat")
    def ollama_chat(self):
        r = self.ol.chat(model=self.model, messages=self.messages, options=self.greedy)
        expect(r.message.role == "assistant" and r.message.content == self.refs["chat_text"], f"{r.message}")
        expect(r.done_reason in ("length", "stop") and r.eval_count == self.refs["chat_tokens"], f"{r}")
        text = "".join(c.message.content for c in self.ol.chat(model=self.model, messages=self.messages, options=self.greedy, stream=True))
        expect(text == self.refs["chat_text"], f"stream {text!r}")

    @check("ollama num_predict, stop -> done_reason, speculation field")
    def ollama_options(self):
        r = self.ol.chat(model=self.model, messages=self.messages, options={"temperature": 0, "num_predict": 3})
        expect(r.eval_count <= 3 and self.refs["chat_text"].startswith(r.message.content), f"num_predict 3: {r}")
        ref = self.refs["chat_text"]
        stop = self.refs["stop"]
        r = self.ol.chat(model=self.model, messages=self.messages, options={"temperature": 0, "num_predict": self.n, "stop": [stop]})
        expect(r.done_reason == "stop" and r.message.content == ref[: ref.index(stop)], f"stop {stop!r}: {r.message.content!r} {r.done_reason}")
        # The ollama client drops fields it does not know; read the
        # extension from the same request over plain HTTP.
        body = self.http.post("/api/chat", json={"model": self.model, "messages": self.messages, "stream": False, "options": self.greedy}).json()
        spec = body["speculation"]
        for k in ("drafted", "accepted", "draft_rounds", "mean_acceptance_length", "acceptance_by_position", "fallbacks"):
            expect(k in spec, f"speculation lacks {k}: {spec}")
        expect(spec["drafted"] >= spec["accepted"] >= 0, f"{spec}")

    @check("ollama errors: unknown model 404, bad option 400, negative num_predict 400")
    def ollama_errors(self):
        for kwargs, status, words in [
            ({"model": "no-such-model", "prompt": "x"}, 404, "not found"),
            ({"model": self.model, "prompt": "x", "options": {"temperature": -1}}, 400, "options.temperature"),
            ({"model": self.model, "prompt": "x", "options": {"num_predict": -7}}, 400, "options.num_predict"),
        ]:
            try:
                self.ol.generate(**kwargs)
            except ollama.ResponseError as e:
                expect(e.status_code == status and words in e.error, f"{kwargs}: {e.status_code} {e.error}")
            else:
                raise AssertionError(f"{kwargs} succeeded")

    # ---- OpenAI -------------------------------------------------------
    @check("openai models list")
    def openai_models(self):
        ids = [m.id for m in self.oa.models.list()]
        expect(self.model in ids, f"{ids}")

    @check("openai chat: non-stream, usage, speculation extension, equal to specula run --chat")
    def openai_chat(self):
        r = self.oa.chat.completions.create(model=self.model, messages=self.messages, temperature=0, max_tokens=self.n)
        expect(r.choices[0].message.content == self.refs["chat_text"], f"{r.choices[0].message.content!r}")
        expect(r.choices[0].finish_reason in ("length", "stop"), r.choices[0].finish_reason)
        expect(r.usage.completion_tokens == self.refs["chat_tokens"], f"{r.usage}")
        expect(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"{r.usage}")
        expect("drafted" in r.model_extra["speculation"], f"{r.model_extra}")

    @check("openai chat stream: role chunk, deltas, finish chunk, include_usage chunk, [DONE]")
    def openai_chat_stream(self):
        chunks = list(self.oa.chat.completions.create(model=self.model, messages=self.messages, temperature=0, max_tokens=self.n,
                                                      stream=True, stream_options={"include_usage": True}))
        expect(chunks[0].choices[0].delta.role == "assistant", f"first {chunks[0]}")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        expect(text == self.refs["chat_text"], f"{text!r}")
        finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        expect(len(finish) == 1 and "speculation" in finish[0].model_extra, f"finish {finish}")
        last = chunks[-1]
        expect(last.choices == [] and last.usage.completion_tokens == self.refs["chat_tokens"], f"usage chunk {last}")
        # Without include_usage there is no usage chunk.
        plain = list(self.oa.chat.completions.create(model=self.model, messages=self.messages, temperature=0, max_tokens=self.n, stream=True))
        expect(all(c.usage is None for c in plain), "usage without include_usage")
        # The raw stream ends with data: [DONE].
        with self.http.stream("POST", "/v1/chat/completions", json={"model": self.model, "messages": self.messages, "stream": True, "max_tokens": 2}) as resp:
            lines = [l for l in resp.iter_lines() if l]
        expect(lines[-1] == "data: [DONE]", f"last line {lines[-1]!r}")

    @check("openai completions: stream and not, equal to specula run")
    def openai_completions(self):
        r = self.oa.completions.create(model=self.model, prompt=self.refs["raw_prompt"], temperature=0, max_tokens=self.n)
        expect(r.choices[0].text == self.refs["raw_text"], f"{r.choices[0].text!r}")
        expect(r.usage.completion_tokens == self.refs["raw_tokens"], f"{r.usage}")
        text = "".join(c.choices[0].text for c in self.oa.completions.create(model=self.model, prompt=self.refs["raw_prompt"], temperature=0,
                                                                             max_tokens=self.n, stream=True) if c.choices)
        expect(text == self.refs["raw_text"], f"stream {text!r}")

    @check("openai completions report real speculation: drafted and accepted tokens")
    def openai_speculation(self):
        r = self.oa.completions.create(model=self.model, prompt=self.refs["raw_prompt"], temperature=0, max_tokens=self.n)
        spec = r.model_extra.get("speculation") or {}
        expect(spec.get("drafted", 0) > 0 and spec.get("accepted", 0) > 0, f"speculation {spec}")

    @check("openai errors: error shape, 404, 400 naming the field")
    def openai_errors(self):
        try:
            self.oa.chat.completions.create(model="no-such-model", messages=self.messages)
        except openai.NotFoundError as e:
            expect(e.status_code == 404 and e.body["type"] == "not_found_error" and "not found" in e.body["message"], f"{e.body}")
        else:
            raise AssertionError("unknown model succeeded")
        for kwargs, param in [({"temperature": 5e40}, "temperature"), ({"max_tokens": -2}, "max_tokens"), ({"top_p": 1.5}, "top_p")]:
            try:
                self.oa.chat.completions.create(model=self.model, messages=self.messages, **kwargs)
            except openai.BadRequestError as e:
                expect(e.status_code == 400 and e.body["param"] == param and e.body["type"] == "invalid_request_error", f"{kwargs}: {e.body}")
            else:
                raise AssertionError(f"{kwargs} succeeded")
        try:
            self.oa.chat.completions.create(model=self.model, messages=[])
        except openai.BadRequestError as e:
            expect(e.body["param"] == "messages", f"{e.body}")
        else:
            raise AssertionError("empty messages succeeded")
        # A prompt longer than the context is refused before the first
        # token: streamed or not, the client raises BadRequestError at
        # create(), not an error in the middle of the stream.
        too_long = [{"role": "user", "content": "hello world " * 5000}]
        for stream in (False, True):
            try:
                self.oa.chat.completions.create(model=self.model, messages=too_long, max_tokens=2, stream=stream)
            except openai.BadRequestError as e:
                expect("context" in e.body["message"], f"stream={stream}: {e.body}")
            else:
                raise AssertionError(f"a prompt longer than the context succeeded (stream={stream})")

    # ---- scheduling ---------------------------------------------------
    @check("client disconnect mid-stream stops the generation; the server keeps serving")
    def disconnect(self):
        before_tokens = self.metric("specula:generation_tokens_total")
        before = self.metrics().get(f'specula:requests_total{{model_name="{self.model}",outcome="cancelled"}}', 0)
        stream = self.ol.generate(model=self.model, prompt=self.refs["long_prompt"], raw=True, stream=True,
                                  options={"temperature": 0, "num_predict": -1})
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        deadline = time.time() + 20
        while time.time() < deadline:
            now = self.metrics().get(f'specula:requests_total{{model_name="{self.model}",outcome="cancelled"}}', 0)
            if now > before:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the cancelled request was never counted")
        generated = self.metric("specula:generation_tokens_total") - before_tokens
        # num_predict -1 runs to the end of the 4096-token context; stopping
        # at the disconnect leaves it far short.
        expect(generated < 2000, f"{generated} tokens generated after a disconnect at token 3")
        r = self.ol.generate(model=self.model, prompt=self.refs["raw_prompt"], raw=True, options=self.greedy)
        expect(r.response == self.refs["raw_text"], "after the disconnect")

    @check("queue full -> 503 with Retry-After; the others complete")
    def queue_full(self):
        body = {"model": self.model, "prompt": self.refs["raw_prompt"], "raw": True, "stream": False,
                "options": {"temperature": 0, "num_predict": 64}}
        n = self.refs["max_queue"] + 8
        barrier = threading.Barrier(n)

        def one(_):
            with httpx.Client(base_url=self.url, timeout=120) as c:
                barrier.wait()
                r = c.post("/api/generate", json=body)
                return r.status_code, r.headers.get("retry-after"), r.json()

        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            results = list(ex.map(one, range(n)))
        busy = [r for r in results if r[0] == 503]
        ok = [r for r in results if r[0] == 200]
        expect(busy, f"no 503 among {n} requests with a queue of {self.refs['max_queue']}")
        expect(all(r[1] and int(r[1]) >= 1 and "server busy" in r[2]["error"] for r in busy), f"503 answers {busy[:2]}")
        expect(len(ok) + len(busy) == n and len(ok) >= self.refs["max_queue"], f"{len(ok)} ok, {len(busy)} busy")
        texts = {r[2]["response"] for r in ok}
        expect(len(texts) == 1, "queued requests disagree")

    @check("prompt cache: the next chat turn resumes from the cache and equals a cold run")
    def prompt_cache(self):
        first = self.ol.chat(model=self.model, messages=self.messages, options=self.greedy)
        turn2 = self.messages + [{"role": "assistant", "content": first.message.content},
                                 {"role": "user", "content": "Say it again, differently."}]
        warm = self.http.post("/api/chat", json={"model": self.model, "messages": turn2, "stream": False, "options": self.greedy}).json()
        expect(warm["speculation"]["cached_tokens"] > 0, f"warm: {warm['speculation']}")
        # Cold: unload, then the same request from fresh caches.
        self.ol.generate(model=self.model, prompt="", keep_alive=0)
        cold = self.http.post("/api/chat", json={"model": self.model, "messages": turn2, "stream": False, "options": self.greedy}).json()
        expect(cold["speculation"]["cached_tokens"] == 0, f"cold: {cold['speculation']}")
        expect(warm["message"]["content"] == cold["message"]["content"], f"warm {warm['message']} != cold {cold['message']}")
        print(f"     prompt cache: next turn prefill {warm['prompt_eval_duration'] / 1e6:.2f} ms warm "
              f"({warm['speculation']['cached_tokens']} cached tokens) vs {cold['prompt_eval_duration'] / 1e6:.2f} ms cold", flush=True)

    @check("64 concurrent streaming clients x 3 requests: each equals the request run alone")
    def load(self):
        prompts, n = self.refs["load_prompts"], 8
        alone = [self.oa.completions.create(model=self.model, prompt=p, temperature=0, max_tokens=n).choices[0].text for p in prompts]
        clients, rounds = 64, 3
        client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0,
                               http_client=httpx.Client(limits=httpx.Limits(max_connections=clients), timeout=300))
        latencies, ttfts = [], []
        lock = threading.Lock()

        def worker(i):
            out = []
            for r in range(rounds):
                k = (i + r) % len(prompts)
                t0 = time.perf_counter()
                first, text = None, []
                for c in client.completions.create(model=self.model, prompt=prompts[k], temperature=0, max_tokens=n, stream=True):
                    if c.choices and c.choices[0].text:
                        first = first or time.perf_counter()
                        text.append(c.choices[0].text)
                done = time.perf_counter()
                with lock:
                    latencies.append(done - t0)
                    ttfts.append((first or done) - t0)
                out.append(("".join(text), alone[k], k))
            return out

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(clients) as ex:
            results = [x for batch in ex.map(worker, range(clients)) for x in batch]
        wall = time.perf_counter() - t0
        client.close()
        bad = [(k, got, want) for got, want, k in results if got != want]
        expect(not bad, f"{len(bad)} of {len(results)} differ from the request run alone, e.g. {bad[:2]}")
        q = statistics.quantiles(latencies, n=100)
        qt = statistics.quantiles(ttfts, n=100)
        print("load: " + json.dumps({
            "clients": clients, "requests": len(results), "max_tokens": n, "wall_s": round(wall, 2),
            "requests_per_s": round(len(results) / wall, 1),
            "latency_s": {"p50": round(q[49], 3), "p90": round(q[89], 3), "p99": round(q[98], 3)},
            "ttft_s": {"p50": round(qt[49], 3), "p90": round(qt[89], 3), "p99": round(qt[98], 3)},
        }), flush=True)

    def unload(self):
        """Unloads the model and returns MLX's active memory and the server's
        goroutines once idle."""
        r = self.ol.generate(model=self.model, prompt="", keep_alive=0)
        expect(r.done_reason == "unload", f"{r}")
        expect(self.ol.ps().models == [], "ps after unload")
        m = self.metrics()
        expect(m["specula:models_loaded"] == 0, "models_loaded")
        # Connections the clients closed end their goroutines shortly.
        last, deadline = None, time.time() + 5
        while time.time() < deadline:
            g = self.metrics()["go_goroutines"]
            if g == last:
                break
            last = g
            time.sleep(0.2)
        return m["specula:mlx_active_memory_bytes"], last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--refs", required=True)
    ap.add_argument("--completion-only", action="store_true", help="only what a base model without a chat template answers")
    args = ap.parse_args()
    with open(args.refs) as f:
        refs = json.load(f)
    refs.setdefault("system", "")
    refs.setdefault("user", "")
    s = Suite(args.url, args.model, refs)
    if args.completion_only:
        s.openai_models()
        s.ollama_generate_raw()
        s.openai_completions()
        s.openai_speculation()
        s.http.close()
        s.oa.close()
        print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed", flush=True)
        return 1 if RESULTS["failed"] else 0
    s.ollama_listing()
    s.ollama_generate_raw()
    s.ollama_generate_templated()
    s.ollama_chat()
    s.ollama_options()
    s.ollama_errors()
    s.openai_models()
    s.openai_chat()
    s.openai_chat_stream()
    s.openai_completions()
    s.openai_errors()
    s.disconnect()
    s.queue_full()
    s.prompt_cache()
    s.load()
    baseline = s.unload()

    @check("a second round (bad input, disconnect, chats, prompt cache), then unload: MLX memory and goroutines back to the first round's")
    def second_round():
        s.ollama_errors()
        s.openai_errors()
        s.disconnect()
        s.ollama_generate_raw()
        s.ollama_chat()
        s.openai_chat_stream()
        s.prompt_cache()
        mem, goroutines = s.unload()
        expect(mem == baseline[0], f"MLX active memory {mem} bytes after the second round, {baseline[0]} after the first")
        expect(goroutines <= baseline[1], f"{goroutines} goroutines after the second round, {baseline[1]} after the first")

    second_round()
    s.http.close()
    s.oa.close()
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed", flush=True)
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
