"""What the routes depend on, as FastAPI dependencies: the service the app was made for and the
request's signed-in user. Both are ``async`` so a polled read never waits for a thread of the
pool just to be told who asks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service


async def get_service(request: Request) -> Service:
    """The `Service` `create_app` was given."""
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]


async def current_user(request: Request, service: ServiceDep) -> User:
    """The request's user (401 when tokens are configured and none valid was sent)."""
    return await service.auth.user_async(request)


Who = Annotated[User, Depends(current_user)]
