"""fragbench-openai-chat (in progress)."""
