-- The role seed (0004) gave the agents tools that no issue has built yet: `webSearch`,
-- `recall` (recall is automatic, not a tool), `useBrowserSecret` and `bifrostNavigator`.
-- A membership names only registered tools (agent-runner's KNOWN_TOOLS is the registry),
-- so they come out of every agent, seeded or edited, in their listed order otherwise;
-- the issue that builds a tool adds it back with its own data migration.
UPDATE popagent_agents
SET tools = array_remove(array_remove(array_remove(array_remove(
        tools, 'webSearch'), 'recall'), 'useBrowserSecret'), 'bifrostNavigator'),
    updated_at = now()
WHERE tools && ARRAY['webSearch', 'recall', 'useBrowserSecret', 'bifrostNavigator'];

-- The seeded instructions told the model to call two of those tools by name. Only the
-- seeded sentences are cut (exact text), so guidance a user rewrote is left as it is.
UPDATE popagent_agents
SET instructions = replace(
        replace(
            replace(
                instructions,
                E'\n- Use webSearch for current external facts and cite the sources you relied on.',
                ''
            ),
            '; browser secrets are filled only through useBrowserSecret.',
            '.'
        ),
        E'\n- Look outward when needed: use webSearch for library documentation, changelogs, known issues and standards, and the browser in read-only mode to read pages. Prefer primary sources (official docs, source repositories, specifications).',
        ''
    ),
    updated_at = now()
WHERE instructions LIKE '%webSearch%' OR instructions LIKE '%useBrowserSecret%';
