"""A scripted model for the OpenAI Agents SDK (its ``Model`` interface), like the SDK's
own test FakeModel: each call answers the next scripted step — a tool call or a text —
and keeps the input it was given."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

Step = tuple[str, Any, Any] | tuple[str, str]


class FakeModel(Model):
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.inputs: list[list[Any]] = []

    def script(self, steps: list[Step]) -> None:
        self.steps.extend(steps)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.inputs.append(copy.deepcopy(list(items)))
        step = self.steps.pop(0)
        out: list[Any]
        if step[0] == "call":
            _, name, args = step  # type: ignore[misc]
            out = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{uuid.uuid4().hex[:12]}",
                    name=name,
                    arguments=json.dumps(args),
                )
            ]
        else:
            out = [
                ResponseOutputMessage(
                    id=f"msg_{uuid.uuid4().hex[:8]}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=step[1], annotations=[])],
                )
            ]
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scenario runs Runner.run")
