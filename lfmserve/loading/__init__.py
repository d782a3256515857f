"""The composition root: a model file found (a local path or a Hugging Face repo) and loaded with its template,
sampling defaults, engine and serving logic, from :class:`~lfmserve.settings.Settings`."""
