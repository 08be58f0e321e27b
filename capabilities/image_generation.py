"""image_generation: `generate_image` draws a picture with a dedicated image model and posts it here.

The drawing is pydantic-ai's own (`pydantic_ai.images.ImageGenerator` over the provider's image
model: OpenAI's GPT Image through `OpenAIImageGenerationModel`), separate from the agent's model, so
it works whatever model the agent runs on. The key comes from the entry's `secret_id` (required:
refused at load without it); `base_url` points it at an OpenAI-compatible server. The tool is
side-effecting (it spends money and posts what people see), so it asks for approval by default; once
approved the image is drawn and posted through the one outbound file path, keyed by the request so
a restart never posts the same request twice. Its cost (pydantic-ai's `ImageGenerationResult.cost()`
over the provider's reported usage, where genai-prices knows the model) is recorded with the run
(`Turn.record_media`: the run's row, `agent-gateway runs list`, the metrics), and goes in the line the
model gets back and the log; the bytes never reach the model.

The image model's client (the gateway's pooled HTTP client, `llm.model_http_client`, its idle connections
kept two minutes) is the daemon's, one per image config and key
(`ImageClients`), reused by every run and closed when the gateway stops: built per run, each run made a
provider with its own HTTP client and SSL context (~26 ms of CPU) and, drawing, opened a connection to the
image server and left it open. A rotated key is a new client; the config keeps that one and the one before
and closes the one before once no run draws through it (`LoopClients`' family); a config a reload replaced
(or removed) is closed the same way (`ImageClients.reloaded`). The capability is built once per config (`shared`): the tool
reads the key at each request and call (an unreadable one hides the tool) and the run from its deps.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal

import httpx2
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ContentFilterError, ModelAPIError, ModelHTTPError
from pydantic_ai.images import ImageGenerator
from pydantic_ai.images.openai import OpenAIImageGenerationModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import RunContext, Tool, ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from gateway.outbound.adapter import OutboundFile, PlatformError
from gateway.outbound.files import FileRefused
from gateway.runs import llm
from gateway.runs.turn import Turn
from gateway.store.run_costs import MediaSpend

from .failures import trouble
from .loop_clients import LoopClients
from .registry import BuildContext, CapabilityDecl, ToolDecl, read_key, register, simple

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig

log = logging.getLogger("capabilities.image_generation")
PROMPT_CHARS = 4000


class ImageGenerationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: Literal["openai"] = Field(default="openai", description="The image provider (its model class takes a key)")
    model: str = Field(default="gpt-image-2", min_length=1, description="That provider's image model")
    base_url: str | None = Field(default=None, description="An OpenAI-compatible server's URL (default: OpenAI's)")
    quality: Literal["low", "medium", "high", "auto"] | None = None
    size: Literal["auto", "1024x1024", "1024x1536", "1536x1024"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    output_format: Literal["png", "webp", "jpeg"] | None = None


def _generator(cfg: ImageGenerationConfig, key: str) -> tuple[httpx2.AsyncClient, ImageGenerator]:
    # The gateway's HTTP client (idle connections kept two minutes, as the models'): a drawing after a pause
    # reuses its connection. Passed in, it stays ours to close (`_close`), not the provider's.
    http = llm.model_http_client()
    provider = OpenAIProvider(base_url=cfg.base_url, api_key=key, http_client=http)
    settings: dict[str, Any] = {f"openai_{name}": value for name, value in
                                (("quality", cfg.quality), ("size", cfg.size), ("background", cfg.background),
                                 ("output_format", cfg.output_format)) if value is not None}
    model = OpenAIImageGenerationModel(cfg.model, provider=provider)
    return http, ImageGenerator(model, settings=settings or None)  # type: ignore[arg-type]


async def _close(made: tuple[httpx2.AsyncClient, ImageGenerator]) -> None:
    await made[0].aclose()


class ImageClients:
    """One image generator (its provider's pooled client) per image config and key, for the daemon's life:
    every run of every agent with that config and key draws through it; `stop()` (the gateway's) closes them."""

    def __init__(self) -> None:
        self._made: LoopClients[tuple[httpx2.AsyncClient, ImageGenerator]] = LoopClients(_close)

    @contextlib.asynccontextmanager
    async def generator(self, cfg: ImageGenerationConfig, key: str) -> AsyncIterator[ImageGenerator]:
        """The generator for `cfg` and `key` while a request draws through it (not closed meanwhile)."""
        # Keyed by the key's digest: the secret itself is kept only inside its client.
        digest = hashlib.sha256(key.encode()).hexdigest()
        config = cfg.model_dump_json()
        async with self._made.lease((config, digest), lambda: _generator(cfg, key), family=config) as made:
            yield made[1]

    def reloaded(self, config: LoadedConfig) -> None:
        """A reload's config: the clients of image configs no agent of it names are closed."""
        self._made.keep(ImageGenerationConfig.model_validate(entry.config).model_dump_json()
                        for agent in config.agents.values() for entry in agent.capabilities
                        if entry.id == "image_generation" and entry.enabled)

    async def stop(self) -> None:
        await self._made.stop()


CLIENTS = ImageClients()


def _name(prompt: str, media_type: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9]+", "-", prompt).strip("-").lower()[:40] or "image"
    return f"{stem}.{media_type.rsplit('/', 1)[-1].replace('jpeg', 'jpg')}"


def _toolset(cfg: ImageGenerationConfig, key: Callable[[], str | None], clients: ImageClients) -> FunctionToolset[Turn]:
    async def generate_image(ctx: RunContext[Turn], prompt: str) -> str:
        """Draw an image from a written description and post it in this conversation.

        Use it when someone asks for a picture, an illustration or a visual idea. For numbers, use
        create_chart instead (it plots data exactly; this draws, and may invent details). Each image is
        drawn by a separate image model and costs money, so draw what was asked, once.

        Args:
            prompt: What to draw, in detail: the subject, the style, the colours, any text to show.
                At most 4000 characters.

        Returns:
            A sentence saying the image was posted (its file name and size, and its cost where the price
            is known), or why not (the provider refused the description, the platform takes no files).
        """
        if not prompt.strip():
            return trouble(ctx, "mistake", "`prompt` is empty: describe what to draw")
        if len(prompt) > PROMPT_CHARS:
            return trouble(ctx, "mistake", f"`prompt` has {len(prompt)} characters; keep it within {PROMPT_CHARS}")
        secret = key()
        if secret is None:
            return trouble(ctx, "transient", "the image provider's key cannot be read now; nothing was drawn")
        try:
            async with clients.generator(cfg, secret) as generator:
                result = await generator.generate(prompt)
        except ContentFilterError:
            return "The image provider refused this description (content moderation); nothing was drawn."
        except (ModelHTTPError, ModelAPIError) as e:
            return trouble(ctx, "transient", f"the image provider did not answer with an image ({type(e).__name__})")
        image = result.image
        price: float | None = None
        try:
            price = float(result.cost().total_price)
        except Exception:  # an unpriced model or a provider genai-prices does not know: counted, no dollars
            price = None
        cost = f", about ${price:.3f}" if price is not None else ""
        log.info("image generated", extra={**ctx.deps.log_fields, "model": result.model_name,
                                           "cost": cost.strip(", ") or "unpriced"})
        # Drawn is paid for, posted or not.
        await ctx.deps.record_media(MediaSpend("image", result.model_name, 1, price))
        file = OutboundFile(_name(prompt, image.media_type), image.data, image.media_type)
        try:
            shared = await ctx.deps.share_files([file], "", f"generate_image:{prompt}")
        except FileRefused as e:
            return f"The image was drawn but not posted: {e}."
        except PlatformError as e:
            return trouble(ctx, "transient", f"the platform did not take the image ({e})")
        return f"{shared.note[:1].upper()}{shared.note[1:]}{cost}. The person sees it; do not paste it as text."

    async def while_the_key_reads(ctx: RunContext[Turn], tool_def: ToolDefinition) -> ToolDefinition | None:
        # Offered only while the key can be read (checked at each request): a tool that could only refuse is
        # not offered, and a key put in place is used from the next request on, without a reload.
        return tool_def if key() is not None else None

    return FunctionToolset([Tool(generate_image, prepare=while_the_key_reads)])


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    cfg = ctx.config
    assert isinstance(cfg, ImageGenerationConfig)
    entry = ctx.entry  # its secret_id is required at load (needs_key); whether it reads is asked per request

    def key() -> str | None:  # read at each call, as web_search reads its key: a rotated file is seen
        secret = read_key(entry)
        return secret.reveal() if secret is not None else None

    return simple(toolsets=[_toolset(cfg, key, CLIENTS)])


register(CapabilityDecl(
    id="image_generation", name="Image generation", category="analysis",
    tools=(ToolDecl("generate_image", side_effecting=True, summary="Draw an image and post it (gated: it costs money)."),),
    build=build, config_model=ImageGenerationConfig, needs_key="required", holds=(CLIENTS,),
    # The tool is the config's, its client the daemon's (`CLIENTS`), its key read at each call; where to
    # post and whose run the spend is recorded on are read from the run's deps at the call.
    shared=True,
    description="Draws an image with a dedicated image model (OpenAI's GPT Image) and posts it in the conversation.",
))
