"""The one table of provider formats: a model profile's ``provider_format`` names one
entry. A new format is one module with a ``ProviderFormat`` and one line here (or
``register`` from its own module)."""

from __future__ import annotations

from domain.context.formats import anthropic_messages, openai_chat, openai_responses
from domain.context.formats.format import ProviderFormat

FORMAT_TABLE: dict[str, ProviderFormat] = {
    f.name: f for f in (openai_chat.FORMAT, openai_responses.FORMAT, anthropic_messages.FORMAT)
}


def register(fmt: ProviderFormat) -> None:
    """Add a format; its name must be new."""
    if fmt.name in FORMAT_TABLE:
        raise ValueError(f"provider format {fmt.name!r} is already registered")
    FORMAT_TABLE[fmt.name] = fmt


def unregister(name: str) -> None:
    FORMAT_TABLE.pop(name, None)
