-- Chat sessions whose browser a user has taken over (POST /api/browser/sessions/:id/takeover):
-- kept across a browser-bridge restart, so a restart never hands the browser back to the agent
-- behind the user's back. Released by DELETE …/takeover or when the chat session is deleted.
CREATE TABLE popagent_browser_takeovers (
    session_id text PRIMARY KEY,
    taken_at timestamptz NOT NULL
);
