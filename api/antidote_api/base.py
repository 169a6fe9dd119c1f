"""The base of every API model, and cross-field rules that exist twice from one declaration:
as CEL (`x-kubernetes-validations`, enforced by the API server) and as a Python check
(enforced by pydantic), with the same message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class Rule:
    """One cross-field rule of a model.

    `cel` sees the object as `self` (camelCase fields); `check` sees the pydantic model.
    `field` (a camelCase field name of this model) is where the server reports a failure.
    Guard optional fields with has(): the server also evaluates rules against a parent's
    `default: {}` before the nested defaults are filled in, and refuses the CRD if one errs.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field: str | None = None
    # A message built from the object (CEL `messageExpression`, and `describe` for the
    # models), e.g. naming the offending keys; `message` stays the server's fallback.
    message_cel: str | None = None
    describe: Callable[[Any], str] | None = None

    def to_crd(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.message_cel:
            out["messageExpression"] = self.message_cel
        if self.field:
            out["fieldPath"] = f".{self.field}"
        return out


def _schema_extra(schema: dict[str, Any], cls: type[ApiModel]) -> None:
    # Class docstrings are for Python readers; field descriptions carry the docs.
    schema.pop("description", None)
    rules = cls.__dict__.get("rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [r.to_crd() for r in rules]


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are an error."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid",
        json_schema_extra=_schema_extra)

    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        for rule in type(self).__dict__.get("rules", ()):
            if not rule.check(self):
                # The field rides in the error's context so `explain` can name it, as the server does.
                raise PydanticCustomError("rule", "{where}{message}", {
                    "where": f"{rule.field}: " if rule.field else "", "field": rule.field or "",
                    "message": rule.describe(self) if rule.describe else rule.message})
        return self

    def wire(self) -> dict[str, Any]:
        """The manifest form: camelCase, JSON types, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def explain(err: ValidationError) -> list[str]:
    """One line per problem, `path.to.field: message`, with camelCase paths as in manifests."""
    lines = []
    for e in err.errors():
        loc = [str(p) if not isinstance(p, int) else f"[{p}]" for p in e["loc"]]
        message = e["msg"]
        if e["type"] == "rule":
            if e["ctx"]["field"]:
                loc.append(e["ctx"]["field"])
            message = e["ctx"]["message"]
        path = ".".join(loc).replace(".[", "[")
        lines.append(f"{path}: {message}" if path else message)
    return lines
