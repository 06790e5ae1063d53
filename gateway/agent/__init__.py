"""The built-in agent: `user.text` → LLM (OpenAI-compatible, or its simulator) → a new turn of the session."""
