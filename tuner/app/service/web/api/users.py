"""``/api/v1/whoami``: the user a token or session belongs to."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tuner.app.service.web.api.deps import Who

router = APIRouter(tags=["users"])


@router.get("/whoami", summary="the user a token or session belongs to")
async def whoami(who: Who) -> dict[str, Any]:
    return {"user": who.name, "admin": who.admin}
