"""Files users attach to chat messages: stored with their session, offered to the model, copied into
a workspace on request (docs/attachments.md).

| module | does |
|---|---|
| `sniff.py` | what an upload is, from its bytes: the images, PDF and UTF-8 text kept, anything else refused |
| `store.py` | `AttachmentStore`: attachments as records (`queries.sql`), bounded, and copied into the workspace |
| `queries.sql` | the attachments' SQL |
| `prompt.py` | a message's attachments loaded for its turn, and each as the model's content |
"""
