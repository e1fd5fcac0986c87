"""The turn: from the newest user message to a stored answer, through the supervisor and its specialists.

| module | does |
|---|---|
| `runner.py` | `TurnRunner`: the turn, from the newest user message to a stored answer |
| `chat_turns.py` | `ChatTurns`: a chat turn started, queued under the session's double-texting policy, followed, cancelled and taken over |
| `records.py` | chat turns as records: status, runner and lease (`popagent_turns`) |
| `progress.py` | `TurnProgress`: the steps a turn completed, stored so another runner can go on after them |
| `peers.py` | `RunnerPresence` and `TurnControl`: a runner announcing itself and answering cancels on core NATS |
| `log.py` | the turn log on JetStream: every batch a turn streamed, for followers |
| `tasks.py` | `TaskTurns`: a background task attempt as one turn |
| `self_update.py` | a contained self-update attempt around a task turn: eligibility, preparation, the attempt's profiles, verification and import |
| `ui_message.py` | the newest user UI message parsed once into a `UserMessage` |
| `agents_factory.py` | pydantic-ai agents built per run from the persisted profiles |
| `agent_runs.py` | one agent run, its tool events and its span |
| `delegation.py` | the supervisor's delegation tools and the specialist runs |
| `capability.py` | step bounds, step observation, `PreToolUse`/`PostToolUse*` |
| `learned.py` | evolution's learned overlays and skills, cached and composed into the profiles |
| `evidence.py` | the evolution evidence a turn publishes, with credentials redacted |
| `failure_texts.py` | what the user reads when the model provider failed |
| `model_check.py` | a requested model refused unless the gateway lists it |
"""
