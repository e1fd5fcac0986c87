"""/api routes backed by the hooks service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
