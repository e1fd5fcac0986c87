"""/api routes for agents."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
