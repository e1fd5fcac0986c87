"""/api routes for sessions."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
