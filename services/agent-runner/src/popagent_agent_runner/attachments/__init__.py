"""Files users attach to chat messages: stored with their session, offered to the model, copied into a workspace on request."""
