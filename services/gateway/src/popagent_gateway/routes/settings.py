"""/api routes for settings."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
