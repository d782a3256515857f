"""Getting a model: a local file or a Hugging Face repo, loaded with its template, defaults and engine."""
