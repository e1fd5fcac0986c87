"""Native channels: Slack, Telegram, Discord and Matrix bots whose conversations are chat sessions (docs/channels.md).

| module | does |
|---|---|
| `store.py` | connections, the (connection, conversation, thread) -> session mapping, taken-in event ids, history, approval cards, relays |
| `credentials.py` | a connection's bot token and inbound key in the secrets service (resource `channels`) |
| `inbound.py` | a delivery's platform signature checked on the raw body, then what it says; what a Matrix /sync answer holds |
| `outbound.py` | posts and edits per platform: its Markdown dialect, its size limit, 429 retries |
| `relay.py` | a turn's reply, read from its log, posted, edited at most once per interval, rolled over to a fresh message before its edits expire, finished with the whole answer |
| `hub.py` | a delivery taken in once, mapped to its session under a per-thread lock, its turn started, its reply relayed from the log (taken over when a runner dies), approval presses answered, each Matrix connection's /sync loop run by one runner |
"""
