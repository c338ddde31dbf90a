"""A LangChain v1 ``create_agent`` agent with its context kept by AgentLoom Context.

One terminal runs every service (``agentloom serve`` is the same command)::

    make serve    # Kafka + PostgreSQL, Prepare, processor, compaction, analytics, console

Once they are ready it prints the URLs, a dev host key and one ``export`` line:
``ALC_PREPARE_URL``, ``ALC_API_KEY``, ``ALC_SPACE_ID``, ``ALC_KAFKA_BOOTSTRAP`` and
``ALC_TOPIC_RECORDS``, exactly what ``AgentLoomMiddleware`` reads. The other terminal::

    export ALC_PREPARE_URL=... ALC_API_KEY=...   # the export line serve printed, whole
    export OPENAI_API_KEY=sk-...                 # the agent's own model
    .venv/bin/pip install langchain-openai       # "openai:gpt-4o-mini" needs it
    .venv/bin/python examples/langchain_agent.py

Ctrl-C in the first terminal stops the services; ``make down`` stops Kafka and PostgreSQL.

The one-line switch: ``SummarizationMiddleware(...)`` → ``AgentLoomMiddleware("conv-1")``.
With LangChain's ``TodoListMiddleware`` beside it, every ``write_todos`` call is also the
thread's plan, pinned in every prepared context — no code of the agent's.
"""

from __future__ import annotations

import asyncio

from langchain.agents import create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from services.integrations.langchain import AgentLoomMiddleware


@tool
def read_table(name: str) -> str:
    """Read a table."""
    return f"{name}: " + ", ".join(f"row{i}={i * 7}" for i in range(20))


async def main() -> None:
    # was: middleware=[SummarizationMiddleware(model="openai:gpt-4o-mini", trigger=...)]
    context = AgentLoomMiddleware("example-lc-conv-1")
    agent = create_agent(
        "openai:gpt-4o-mini",
        [read_table],
        system_prompt="Answer briefly.",
        middleware=[TodoListMiddleware(), context],
    )
    try:
        for question in ("What is in table t1?", "And in t2?", "Which one has more rows?"):
            # No checkpointer needed: the conversation's history is ours.
            result = await agent.ainvoke({"messages": [HumanMessage(question)]})
            print(f"> {question}\n{result['messages'][-1].content}\n")
    finally:
        context.close()


if __name__ == "__main__":
    asyncio.run(main())
