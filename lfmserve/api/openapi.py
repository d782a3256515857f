"""``/openapi.json`` with the request bodies the POST routes read: handlers parse raw JSON themselves (for
llama-server's error shape), so FastAPI cannot see their models; routes declare them with :func:`request_body`,
and generic fuzzers and client generators then see every field."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .body import built

#: Every model a route declared, by name (the name is its schema's place in ``components.schemas``).
_BODIES: dict[str, type[BaseModel]] = {}


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra``: its JSON body follows ``model``."""
    _BODIES[model.__name__] = model
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def build_bodies() -> None:
    """Build every declared body's validator now. A router's fork server does, before it forks: each child then
    inherits them built, where it would otherwise build one on its first request of each API family."""
    for model in _BODIES.values():
        built(model)


def install_openapi(app: FastAPI) -> None:
    """Serve the generated schema with the declared bodies' models added to its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
            _, definitions = models_json_schema(
                [(built(model), "validation") for model in _BODIES.values()],
                ref_template="#/components/schemas/{model}",
            )
            spec.setdefault("components", {}).setdefault("schemas", {}).update(definitions["$defs"])
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
