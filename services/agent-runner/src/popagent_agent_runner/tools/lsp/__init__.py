"""Code inspection through language servers: `mastra_workspace_lsp_inspect` (read-only, every role)."""
