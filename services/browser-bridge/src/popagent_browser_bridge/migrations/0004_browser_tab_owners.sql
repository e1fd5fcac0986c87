-- Which chat session owns each browser tab, by the browser's own target id of the page: a
-- browser-bridge restarted against a browser that outlived its MCP session (a desktop BifrOSt
-- shared with other clients) gives each session its tabs back. Rows of closed pages are deleted
-- when the bridge sees them gone.
CREATE TABLE popagent_browser_tab_owners (
    target_id text PRIMARY KEY,
    session_id text NOT NULL,
    updated_at timestamptz NOT NULL
);
