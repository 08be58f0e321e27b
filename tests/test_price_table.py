"""genai-prices' table (4.7 MiB, ~40 ms to load) waits until something it could price is built or looked up
(gateway/runs/llm.py): the offline demo answers without it, and what is priced is priced as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import ROOT

# In a fresh interpreter: with argv[1] == "demo-first", the offline demo answers first; then a priced model is
# built as a config's `model:` builds it, and what pydantic-ai prices with the table is printed: a chat
# response's cost, an image's (what the image_generation capability records with the run) and a context
# window (what compaction reads).
SCRIPT = """
import asyncio, json, sys
from pydantic_ai import Agent
from pydantic_ai._genai_prices import lookup_context_window
from pydantic_ai.images import ImageGenerationResult
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.usage import RequestUsage
from gateway.runs import llm

loaded = {}
if sys.argv[1] == "demo-first":
    async def demo():
        async with Agent(llm.demo_model()).run_stream("hello") as run:
            return await run.get_output()
    assert "offline demo" in asyncio.run(demo())
    loaded["after the demo's answer"] = "genai_prices.data" in sys.modules
llm.resolve_model("openai:gpt-4.1-mini", {})
loaded["after building openai:gpt-4.1-mini"] = "genai_prices.data" in sys.modules
chat = ModelResponse([TextPart("hi")], model_name="gpt-4o", provider_name="openai",
                     provider_url="https://api.openai.com/v1", usage=RequestUsage(input_tokens=1000, output_tokens=200))
image = ImageGenerationResult([], prompt="", model_name="gpt-image-2", provider_name="openai",
                              usage=RequestUsage(input_tokens=12, output_tokens=272))
print(json.dumps({"loaded": loaded, "chat": str(chat.cost().total_price), "image": str(image.cost().total_price),
                  "window": lookup_context_window("gpt-4o", provider_name="openai")}))
"""


def _run(mode: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "AGENT_GATEWAY_MODEL")}
    env["OPENAI_API_KEY"] = "sk-not-used"  # the model is built, never called
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_demo_answers_without_the_price_table_and_a_priced_model_is_priced_as_before() -> None:
    demo_first, alone = _run("demo-first"), _run("priced-only")
    # The demo's answer did not load it; the priced model's build did (as pydantic-ai's own `Model()` does, so
    # that no run's first lookup loads it on the event loop).
    assert demo_first.pop("loaded") == {"after the demo's answer": False, "after building openai:gpt-4.1-mini": True}
    assert alone.pop("loaded") == {"after building openai:gpt-4.1-mini": True}
    # And the prices and the context window are the table's, as in a process that never ran the demo.
    assert demo_first == alone
    assert float(str(alone["chat"])) > 0 and float(str(alone["image"])) > 0 and alone["window"] == 128_000
