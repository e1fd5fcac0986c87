"""A registered repository as the agents' hands reach it: contained files and a sandboxed shell.

| module | does |
|---|---|
| `paths.py` | repository-relative paths resolved one component at a time from an open directory |
| `files.py` | the file operations the workspace tools run (read, write, edit, list, grep, stat, mkdir, delete) |
| `gitignore.py` | `.gitignore` matching for listings and grep |
| `patterns.py` | RE2 for every regular expression a model or a workspace file wrote (linear time, bounded memory) |
| `git.py` | host git, with a hardened environment and configuration |
| `checkout.py` | cloning a repository into the workspace root |
| `self_update.py` | contained self-update's git: capture a clean checkout, a remote-less clone, commit, verify, import as a local ref |
| `sandbox.py` | commands under bubblewrap: no network, allow-listed environment, bounded processes, memory and output, killed process groups |
| `disk_budget.py` | a workspace's disk budget: its usage measured, the room a command gets, writes refused past it |

A turn holds one repository through `context/hands.py`; the tools themselves (Mastra's registry keys)
are in `tools/workspace/`.
"""
