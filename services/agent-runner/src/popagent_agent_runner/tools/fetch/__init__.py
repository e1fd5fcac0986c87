"""Web fetch tools: `webFetch`, one page as Markdown, through the kernel's address guard."""
