"""/api routes for schedules."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
