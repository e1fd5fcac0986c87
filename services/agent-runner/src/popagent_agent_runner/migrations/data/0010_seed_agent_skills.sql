-- Two Agent Skills per system agent, written for popagent and attributed to the role
-- profile each one builds on. Seeded once: ON CONFLICT (agent_id, name) DO NOTHING keeps a
-- skill a user already edited or created under that name; after this PostgreSQL is canonical.
INSERT INTO popagent_agent_skills (
    id, agent_id, name, description, instructions, named_references,
    source_url, attribution, license, compatibility, metadata, enabled
) VALUES
(
    gen_random_uuid(), 'popagent', 'delegation-brief',
    'Write a complete, self-contained brief before delegating to the researcher, implementer or reviewer. Use it whenever you are about to call a delegation tool.',
    $s$# Delegation brief

Specialists see only the brief you send, never this conversation. Before every delegation, write the brief with these parts, in this order:

1. **Goal**: one sentence stating what the specialist must achieve and what "done" means.
2. **Context**: the files, folders, URLs and facts already known. Quote short excerpts instead of saying "as discussed".
3. **Constraints**: what must not change, style or scope limits the user gave, and the specialist's own access (read-only or read-write).
4. **Verification**: the commands, tests or checks that prove the work (implementer), or the questions the evidence must answer (researcher, reviewer).
5. **Answer form**: the exact shape you need back (for example "outcome line, files changed, commands run with results").

Send one focused task per delegation. If a brief needs more than one goal, split it. For a review, never include your own opinion of the change; give the goal, the change summary and the files. See `references/examples.md` for a filled-in brief.$s$,
    jsonb_build_object('references/examples.md', $r$# A filled-in implementer brief

Goal: make `parse_duration("90s")` return 90 seconds; done when the new test passes.
Context: `src/time/parse.py` handles only `m` and `h` suffixes (lines 10-24); tests live in `tests/test_parse.py`.
Constraints: do not change the public signature; keep the existing error messages.
Verification: run `pytest tests/test_parse.py -q` and report the counts.
Answer form: outcome line; each file changed with one line; the command and its result.$r$),
    'https://github.com/msitarzewski/agency-agents/blob/main/specialized/agents-orchestrator.md',
    'Written for popagent; follows the delegation practice of the Agents Orchestrator profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'popagent', 'answer-verification',
    'Check a final answer against the evidence of this turn before sending it. Use it before every answer that reports work as done, tested or verified.',
    $s$# Answer verification

Before you write the final answer:

1. List each claim the answer makes that something was run, changed, tested or found.
2. For every claim, find the tool result or specialist report in this turn that shows it. A claim without evidence is removed or rewritten as "not verified".
3. Check the answer against the user's goal as you restated it at the start: is every part done, or said to be not done, with the reason?
4. Remove raw tool output; quote only the lines that matter.
5. Put the result first, then the evidence, then open questions or decisions the user must make.

If a delegation failed or was truncated, say so plainly and what you did instead.$s$,
    '{}'::jsonb,
    'https://github.com/msitarzewski/agency-agents/blob/main/specialized/agents-orchestrator.md',
    'Written for popagent; follows the quality-gate practice of the Agents Orchestrator profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'researcher', 'source-verification',
    'Separate verified facts from assumptions and prefer primary sources. Use it when a finding depends on documentation, a web page or a library''s behaviour.',
    $s$# Source verification

1. Prefer primary sources: the project's own files, official documentation, the library's source repository, specifications and changelogs. Use secondary sources (blogs, forums) only to find primary ones.
2. For each finding, record where it came from: a file path with line numbers or symbol, or a URL.
3. Check the version: documentation for another version than the one in use is labelled as such.
4. Label every finding as **verified** (you read it in the source) or **assumed** (inferred from names, memory or a secondary source).
5. When two sources disagree, report both and which one the code in the workspace actually follows.

End with the open questions that would change the answer.$s$,
    '{}'::jsonb,
    'https://github.com/msitarzewski/agency-agents/blob/main/engineering/engineering-codebase-onboarding-engineer.md',
    'Written for popagent; follows the evidence practice of the Codebase Onboarding Engineer profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'researcher', 'code-path-tracing',
    'Trace how a behaviour actually flows through a codebase, from entry point to effect. Use it when asked how something works or where a change would go.',
    $s$# Code path tracing

1. Find the entry point: the route, command, handler or public function the behaviour starts at. Search for the user-visible name (URL path, CLI flag, error text) first.
2. Follow each call into the next file. Read the function bodies; do not infer behaviour from names.
3. Note where state is read or written (database queries, files, caches, events) and where errors are raised or translated.
4. Stop at the effect the question is about, and write the path as a numbered list of `file:symbol` steps with one line each.
5. Note the conventions you saw on the way (naming, error handling, tests) so the implementer can follow them.

See `references/checklist.md` for what to look for at each step.$s$,
    jsonb_build_object('references/checklist.md', $r$# At each step of a trace

- Which inputs are validated here, and how are bad inputs answered?
- Which state is read or written, and inside which transaction or lock?
- Which errors are raised, caught or translated?
- Which tests cover this step (search the tests for the symbol)?
- Is anything configurable here (settings, environment variables)?$r$),
    'https://github.com/msitarzewski/agency-agents/blob/main/engineering/engineering-codebase-onboarding-engineer.md',
    'Written for popagent; follows the code-reading practice of the Codebase Onboarding Engineer profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'implementer', 'minimal-change',
    'Make the smallest complete change that meets the goal and follows the codebase''s patterns. Use it for every edit to the repository.',
    $s$# Minimal change

1. Read every file you will change and the code around it before editing; a file must be read in this run before it is written.
2. Find an existing example of the same kind of change in the codebase and follow its structure, naming and error handling.
3. Change only what the goal needs. Keep refactors, formatting churn and speculative features out.
4. Update the tests and documentation that the change makes wrong, and add a test that fails without the change.
5. Re-read the diff once before verifying: remove debug output and unrelated edits.$s$,
    '{}'::jsonb,
    'https://github.com/msitarzewski/agency-agents/blob/main/engineering/engineering-senior-developer.md',
    'Written for popagent; follows the implementation practice of the Senior Developer profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'implementer', 'test-failure-triage',
    'Work out why a test or command fails and fix the cause, not the symptom. Use it whenever verification fails.',
    $s$# Test failure triage

1. Read the whole failure: the assertion, the traceback's innermost frame in project code, and any captured output.
2. Reproduce it with the narrowest command (one test), and confirm it fails the same way.
3. Decide whose fault it is: the change under work, the test's expectation, or the environment (missing tool, no network in the sandbox). Say which, with the evidence.
4. Fix the cause. Never weaken an assertion, skip a test or add a sleep to make it pass.
5. Run the narrow command again, then the wider set that covers the touched code, and report both results.

If the failure is in the environment and cannot be fixed from the workspace, stop and report it.$s$,
    '{}'::jsonb,
    'https://github.com/msitarzewski/agency-agents/blob/main/engineering/engineering-senior-developer.md',
    'Written for popagent; follows the verification practice of the Senior Developer profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'reviewer', 'security-review',
    'Review a change for security problems: input handling, injection, path containment, secrets, authorization and resource limits. Use it on every review of code that handles input, files, commands or credentials.',
    $s$# Security review

Check, for the code the change touches:

1. **Input**: is every external input validated for type, length and range before use?
2. **Injection**: are SQL, shell commands, HTML and paths built from input only through parameters or escaping?
3. **Paths**: do file paths resolve inside the allowed root after symlinks are resolved?
4. **Secrets**: are credentials kept out of logs, errors, files, prompts and tool arguments?
5. **Authorization**: does every new route or command check who may call it?
6. **Limits**: are sizes, counts, timeouts and concurrency bounded?

Report each problem as blocking or should-fix with the location and a concrete fix. See `references/examples.md` for typical findings.$s$,
    jsonb_build_object('references/examples.md', $r$# Typical findings

- Blocking: `open(os.path.join(root, name))` with `name` from the request; `../` escapes the root. Fix: resolve the real path and compare path components with the real root.
- Blocking: an exception message includes the API key from the request headers. Fix: log a fixed message and the key's presence only.
- Should-fix: a list endpoint without a limit. Fix: cap the page size and document it.$r$),
    'https://github.com/msitarzewski/agency-agents/blob/main/engineering/engineering-code-reviewer.md',
    'Written for popagent; follows the security section of the Code Reviewer profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
),
(
    gen_random_uuid(), 'reviewer', 'test-review',
    'Judge whether a change''s tests would fail if the code were wrong. Use it on every review of a change that adds or edits tests.',
    $s$# Test review

1. For each behaviour the change adds or fixes, find the test that covers it. A behaviour without a test is a finding.
2. Ask of each test: would it fail if the code under test returned a wrong value, raised, or did nothing? Tautological tests (asserting what they just set up) are findings.
3. Look for skipped tests, broad exception catches, sleeps used as synchronization and assertions on timing.
4. Check that error paths and edge cases (empty input, limits, concurrency) are tested, not only the happy path.
5. Check that tests use real collaborators where the project's convention asks for them, rather than mocks.$s$,
    '{}'::jsonb,
    'https://github.com/msitarzewski/agency-agents/blob/main/engineering/engineering-code-reviewer.md',
    'Written for popagent; follows the testing section of the Code Reviewer profile in msitarzewski/agency-agents.',
    '', '', '{}'::jsonb, true
)
ON CONFLICT (agent_id, name) DO NOTHING;
