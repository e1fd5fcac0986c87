"""What every test suite shares (on sys.path as `support`; nothing here is a test).

- `stacks`: the in-process stack of real services (`start_stack(spec)`; the API, chat and
  task-turn suites differ only by their `StackSpec`), and its parts: `fresh_database`,
  `serve_gateway`, `serve_hooks`.
- `waiting`: `eventually`, the one way a test waits for something to happen.
- `model_gateway`: the scripted OpenAI-compatible server that stands in for 9Router.
- `https_receiver`: a real HTTPS server that answers hook deliveries from a script.
- `launcher`: `make run`'s launcher started as a user starts it.
- `sse`, `ai_sdk_client`: reading the gateway's UI message stream, by hand and with the AI SDK.
- `canary`: the session's canary secret and the plugin that fails a test whose output holds it.

Helpers one suite alone uses live next to its tests (`chat/helpers.py`, `tasks/harness.py`,
...); conftest files hold only fixtures, and no module imports a conftest or a test module
(tests/test_layout.py checks both).
"""
