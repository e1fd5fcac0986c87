"""A user's MCP server protected by OAuth 2.1, written with the `mcp` SDK's server auth support, run as
its own process by the tests (`harness.serving_oauth_peer`):

    python oauth_peer.py <port>

The SDK serves the authorization server (RFC 8414 metadata, RFC 7591 registration, the authorize and
token endpoints checking PKCE S256) and the protected resource (RFC 9728 metadata, 401 with
`WWW-Authenticate: Bearer resource_metadata=...` on /mcp without a valid token; tokens are bound to
the RFC 8707 resource /mcp). The provider below keeps everything in memory and approves every
authorization at once, as a user who clicks "allow" would. Tool: `whoami` (the client it was called
by). Test controls, unauthenticated: `POST /test/expire` (every access token held stops being
accepted), `POST /test/revoke` (every access and refresh token too), `POST /test/lifetime?seconds=N`
(the next tokens' lifetime), `GET /test/stats`, `GET /test/issued` (every token and client secret
issued).
"""

from __future__ import annotations

import secrets
import sys
import time
from typing import Any

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SCOPE = "tools"


class AutoApprovingProvider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.lifetime_s = 3600
        # Every token and client secret issued, for the tests to look for where none may be.
        self.issued: list[str] = []
        self.stats: dict[str, Any] = {
            "registered": 0,
            "authorized": 0,
            "exchanged": 0,
            "refreshed": 0,
            "resources": [],
            "unauthorized": 0,
        }

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        if client_info.client_secret:
            self.issued.append(client_info.client_secret)
        self.stats["registered"] += 1

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        assert client.client_id is not None
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="alice",
        )
        self.stats["authorized"] += 1
        self.stats["resources"].append(params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.stats["exchanged"] += 1
        return self._issue(authorization_code.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # Rotated: the refresh token presented is used up.
        self.refresh.pop(refresh_token.token, None)
        self.stats["refreshed"] += 1
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "at-" + secrets.token_urlsafe(24)
        refresh = "rt-" + secrets.token_urlsafe(24)
        expires_at = int(time.time()) + self.lifetime_s
        self.issued.extend((access, refresh))
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires_at, resource=resource, subject="alice"
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject="alice"
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.lifetime_s,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )


class CountingRefusals:
    """Counts the 401 answers of the MCP endpoint."""

    def __init__(self, app: ASGIApp, provider: AutoApprovingProvider) -> None:
        self.app = app
        self.provider = provider

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401 and scope["path"] == "/mcp":
                self.provider.stats["unauthorized"] += 1
            await send(message)

        await self.app(scope, receive, counting if scope["type"] == "http" else send)


def build(port: int) -> tuple[ASGIApp, AutoApprovingProvider]:
    base = f"http://127.0.0.1:{port}"
    provider = AutoApprovingProvider()
    server = MCPServer(
        "oauth-peer",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            validate_token_resource=True,
            required_scopes=[SCOPE],
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
            ),
        ),
    )

    def whoami() -> str:
        """Who the server was called by."""
        token = get_access_token()
        return f"called by client {token.client_id if token else '?'} for {token.subject if token else '?'}"

    server.add_tool(whoami, name="whoami")

    @server.custom_route("/test/expire", methods=["POST"])
    async def expire(request: Request) -> Response:
        for token in provider.access.values():
            token.expires_at = int(time.time()) - 1
        return JSONResponse({"expired": len(provider.access)})

    @server.custom_route("/test/revoke", methods=["POST"])
    async def revoke(request: Request) -> Response:
        provider.access.clear()
        provider.refresh.clear()
        return JSONResponse({"revoked": True})

    @server.custom_route("/test/lifetime", methods=["POST"])
    async def lifetime(request: Request) -> Response:
        provider.lifetime_s = int(request.query_params["seconds"])
        return JSONResponse({"lifetime": provider.lifetime_s})

    @server.custom_route("/test/issued", methods=["GET"])
    async def issued(request: Request) -> Response:
        return JSONResponse(provider.issued)

    @server.custom_route("/test/stats", methods=["GET"])
    async def stats(request: Request) -> Response:
        return JSONResponse(provider.stats)

    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    return CountingRefusals(app, provider), provider


def main() -> None:
    port = int(sys.argv[1])
    app, _ = build(port)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
