"""Repository definitions under POPAGENT_WORKSPACE_ROOT."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import (
    NAME_PATTERN,
    RELATIVE_PATH_DESCRIPTION,
    RELATIVE_PATH_PATTERN,
    PatchModel,
    WireInput,
    WireModel,
)

WORKSPACE_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
# A filter: a workspace id, or empty for all.
OPTIONAL_WORKSPACE_ID_PATTERN = r"^(?:[a-z0-9][a-z0-9-]{0,62})?$"
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)]
RelativePath = Annotated[str, Field(min_length=1, max_length=1024, pattern=RELATIVE_PATH_PATTERN)]
Description = Annotated[str, Field(max_length=2000)]


class WorkspaceOut(WireModel):
    id: str
    name: str
    path: str = Field(description="relative to POPAGENT_WORKSPACE_ROOT")
    description: str
    exists: bool = Field(description="whether the folder exists right now")
    is_default: bool
    created_at: str
    updated_at: str


class WorkspaceListOut(WireModel):
    workspaces: list[WorkspaceOut]


class WorkspaceCreate(WireInput):
    id: Annotated[str, Field(pattern=WORKSPACE_ID_PATTERN)] | SkipJsonSchema[None] = Field(
        default=None, description="omit to derive it from the name"
    )
    name: Name
    path: RelativePath = Field(
        description=f"relative to POPAGENT_WORKSPACE_ROOT; must resolve inside it; {RELATIVE_PATH_DESCRIPTION}"
    )
    description: Description = ""


class WorkspacePatch(PatchModel):
    name: Name | SkipJsonSchema[None] = None
    path: RelativePath | SkipJsonSchema[None] = None
    description: Description | SkipJsonSchema[None] = None
