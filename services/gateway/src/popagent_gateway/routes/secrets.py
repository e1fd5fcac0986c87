"""/api routes backed by the secrets service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
