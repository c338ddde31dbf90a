"""The OpenAI Agents SDK with its history kept by AgentLoom Context.

One terminal runs every service (``agentloom serve`` is the same command)::

    make serve    # Kafka + PostgreSQL, Prepare, processor, compaction, analytics, console

Once they are ready it prints the URLs, a dev host key and one ``export`` line:
``ALC_PREPARE_URL``, ``ALC_API_KEY``, ``ALC_SPACE_ID``, ``ALC_KAFKA_BOOTSTRAP`` and
``ALC_TOPIC_RECORDS``, exactly what ``AgentLoomSession`` reads. The other terminal::

    export ALC_PREPARE_URL=... ALC_API_KEY=...   # the export line serve printed, whole
    export OPENAI_API_KEY=sk-...                 # the agent's own model
    .venv/bin/python examples/openai_agents_session.py

Ctrl-C in the first terminal stops the services; ``make down`` stops Kafka and PostgreSQL.

The one-line switch: ``SQLiteSession("conv-1")`` → ``AgentLoomSession("conv-1")``.
With ``plan_tool()`` among the agent's tools, the plan the model keeps with it is pinned
in every prepared context (the session publishes each ``update_plan`` call it stores).
"""

from __future__ import annotations

import asyncio

from agents import Agent, Runner, function_tool

from services.integrations.openai_agents import AgentLoomSession, plan_tool


@function_tool
def read_table(name: str) -> str:
    """Read a table."""
    return f"{name}: " + ", ".join(f"row{i}={i * 7}" for i in range(20))


async def main() -> None:
    agent = Agent(
        name="analyst",
        instructions="Answer briefly. Keep your plan with update_plan.",
        tools=[read_table, plan_tool()],
    )
    session = AgentLoomSession("example-conv-1")  # was: SQLiteSession("example-conv-1")
    try:
        for question in ("What is in table t1?", "And in t2?", "Which one has more rows?"):
            result = await Runner.run(agent, question, session=session)
            print(f"> {question}\n{result.final_output}\n")
        print(f"{len(await session.get_items())} items in the prepared context")
    finally:
        session.close()


if __name__ == "__main__":
    asyncio.run(main())
