"""OAuth 2.1 for users' streamable HTTP MCP servers, per the MCP authorization spec.

Connecting a server (`auth` "oauth") takes two HTTP requests of the user's, and the user's browser
between them: `start` discovers the server's protected resource metadata (RFC 9728, from its 401's
`WWW-Authenticate` or the well-known URLs), its authorization server's metadata (RFC 8414), registers
a client with it (RFC 7591; the registration is kept and reused), and answers the authorization URL
with a PKCE S256 challenge, the `resource` (RFC 8707) and a state; `complete` takes the state back
(single-use, expiring: `popagent_mcp_oauth_starts`), checks the issuer (RFC 9207) and exchanges the
code. The client registration and the tokens go to the secrets service (resource `mcp-servers`,
`<id>.oauth-client` and `<id>.oauth-tokens`, through `SecretOAuthStorage`, the SDK's `TokenStorage`);
the server's row holds what is public (the metadata, when the access token expires, why a refresh
was refused).

Why not the SDK's `OAuthClientProvider` as a whole: its flow is one httpx auth generator that must
receive the authorization code within the request that met the 401 (its `callback_handler`), while
here the user authorizes in a browser and the code arrives on another request (the gateway's
callback), possibly at another process; a turn cannot open a browser at all. The provider also loads
stored tokens without their expiry and answers a 401 with a full re-authorization rather than a
refresh. So the steps are driven here, with the SDK's pieces: its discovery URL builders and metadata
parsers, its registration request and answer handling, `PKCEParameters`, `OAuthContext`'s client
authentication at the token endpoint, its RFC 9207 check, and its models.

A connection (`connection.py`) authenticates with `OAuthBearer`: the access token held, refreshed
shortly before it expires or when the server answers 401; a refresh the authorization server refuses
marks the server as needing connecting again, and its tools say so at once instead of waiting.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn
from urllib.parse import urlencode, urlparse

import asyncpg
import httpx2
import orjson
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError, PKCEParameters
from mcp.client.auth.oauth2 import OAuthContext, check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    handle_token_response_scopes,
    issuers_match,
    validate_authorization_response_iss,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import LATEST_PROTOCOL_VERSION
from pydantic import AnyUrl, ValidationError

from popagent_agent_runner.mcp.store import QUERIES, TokenKeeper
from popagent_core.db import wrap_db_errors
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound, PopagentError, Unavailable

logger = logging.getLogger(__name__)

# How long an authorization URL's state is accepted: the user signs in and consents meanwhile.
START_TTL_S = 600.0
# A token is refreshed this long before it expires (a quarter of its lifetime when that is shorter).
REFRESH_MARGIN_S = 30.0
HTTP_TIMEOUT_S = 10.0
CLIENT_NAME = "popagent"
GRANT_TYPES = ["authorization_code", "refresh_token"]
MAX_STATE_CHARS = 512
MAX_CODE_CHARS = 4096
MAX_ERROR_CHARS = 300


def client_secret_name(server_id: str) -> str:
    return f"{server_id}.oauth-client"


def tokens_secret_name(server_id: str) -> str:
    return f"{server_id}.oauth-tokens"


class ReconnectNeeded(FailedPrecondition):
    """The server's tokens are gone or refused: only the user can connect it again."""

    @classmethod
    def of(cls, server_name: str, reason: str) -> ReconnectNeeded:
        return cls(
            f"reconnect needed: {reason}; connect MCP server {server_name} again (Connect on the MCP servers page)"
        )


@dataclass(frozen=True)
class Started:
    authorization_url: str
    expires_at: datetime


@dataclass(frozen=True)
class HeldToken:
    access_token: str
    # time.time() when it should be refreshed; None: only when the server refuses it.
    refresh_at: float | None

    def due(self) -> bool:
        return self.refresh_at is not None and time.time() >= self.refresh_at


@dataclass(frozen=True)
class _Discovered:
    metadata: OAuthMetadata
    resource: str
    scope: str | None


@dataclass(frozen=True)
class _OAuthServer:
    id: str
    name: str
    url: str
    connected: bool
    expires_at: datetime | None
    discovered: _Discovered | None


class SecretOAuthStorage:
    """The SDK's `TokenStorage` for one server, kept in the secrets service."""

    def __init__(self, secrets_keeper: TokenKeeper, server_id: str) -> None:
        self.secrets = secrets_keeper
        self.server_id = server_id

    async def get_tokens(self) -> OAuthToken | None:
        value = await self._resolve(tokens_secret_name(self.server_id))
        return OAuthToken.model_validate_json(value) if value else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self.secrets.put(tokens_secret_name(self.server_id), tokens.model_dump_json(exclude_none=True))

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        value = await self._resolve(client_secret_name(self.server_id))
        return OAuthClientInformationFull.model_validate_json(value) if value else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.secrets.put(client_secret_name(self.server_id), client_info.model_dump_json(exclude_none=True))

    async def drop_tokens(self) -> None:
        await self.secrets.delete(tokens_secret_name(self.server_id))

    async def forget(self) -> None:
        await self.secrets.delete(tokens_secret_name(self.server_id))
        await self.secrets.delete(client_secret_name(self.server_id))

    async def _resolve(self, name: str) -> str:
        try:
            return await self.secrets.resolve(name)
        except NotFound:
            return ""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _bounded(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:MAX_ERROR_CHARS]


def _origin(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def _refresh_at(token: OAuthToken, expires_at: datetime | None) -> float | None:
    if expires_at is None:
        return None
    margin = min(REFRESH_MARGIN_S, (token.expires_in or 0) / 4)
    return expires_at.timestamp() - margin


async def _error_of(response: httpx2.Response) -> str:
    """An OAuth error answer (RFC 6749 5.2) as a short line; never the whole body."""
    await response.aread()
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        described = body.get("error_description")
        suffix = f": {described}" if isinstance(described, str) and described else ""
        return _bounded(f"HTTP {response.status_code} {body['error']}{suffix}")
    return f"HTTP {response.status_code}"


class OAuthKeeper:
    def __init__(self, pool: asyncpg.Pool, secrets_keeper: TokenKeeper) -> None:
        self.pool = pool
        self.secrets = secrets_keeper

    def storage(self, server_id: str) -> SecretOAuthStorage:
        return SecretOAuthStorage(self.secrets, server_id)

    async def forget(self, server_id: str) -> None:
        await self.storage(server_id).forget()

    @staticmethod
    def _http() -> httpx2.AsyncClient:
        # Redirects are not followed: metadata, registration and token answers come from the URL asked.
        return httpx2.AsyncClient(timeout=HTTP_TIMEOUT_S, follow_redirects=False)

    async def _server(self, server_id: str, conn: Any = None) -> _OAuthServer:
        with wrap_db_errors():
            row = await (conn or self.pool).fetchrow(QUERIES["oauth_server"], server_id)
        if row is None:
            raise NotFound(f"MCP server {server_id!r} not found")
        if row["auth"] != "oauth":
            raise FailedPrecondition(f"MCP server {row['name']} does not use OAuth (its auth is {row['auth']})")
        discovered = None
        if row["oauth_server"]:
            stored = orjson.loads(row["oauth_server"])
            discovered = _Discovered(
                OAuthMetadata.model_validate(stored["metadata"]), stored["resource"], stored.get("scope")
            )
        return _OAuthServer(
            row["id"], row["name"], row["url"], row["oauth_connected"], row["oauth_expires_at"], discovered
        )

    # --- connecting: start and complete -------------------------------------------------------------

    async def start(self, server_id: str, redirect_uri: str) -> Started:
        server = await self._server(server_id)
        try:
            async with self._http() as http:
                discovered = await self._discover(http, server.url)
                client = await self._client(http, server.id, discovered, redirect_uri)
        except PopagentError:
            raise
        except (OAuthFlowError, OAuthRegistrationError, OAuthTokenError) as exc:
            raise FailedPrecondition(f"MCP server {server.name}: {_bounded(str(exc))}") from None
        except httpx2.HTTPError as exc:
            raise Unavailable(f"MCP server {server.name}: its authorization could not be reached: {exc}") from None
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        expires_at = datetime.now(UTC) + timedelta(seconds=START_TTL_S)
        params = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
            "resource": discovered.resource,
        }
        if discovered.scope:
            params["scope"] = discovered.scope
        endpoint = str(discovered.metadata.authorization_endpoint)
        url = f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"
        stored = {
            "metadata": discovered.metadata.model_dump(mode="json", exclude_none=True),
            "resource": discovered.resource,
            "scope": discovered.scope,
        }
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                await conn.execute(QUERIES["purge_oauth_starts"])
                changed = await conn.execute(
                    QUERIES["set_oauth_server"], server.id, orjson.dumps(stored).decode(), server.url
                )
                if changed.endswith(" 0"):
                    raise FailedPrecondition(f"MCP server {server.name} changed meanwhile: start again")
                await conn.execute(
                    QUERIES["insert_oauth_start"],
                    _sha256(state),
                    server.id,
                    pkce.code_verifier,
                    redirect_uri,
                    expires_at,
                )
        logger.info("MCP OAuth authorization started", extra={"server": server.name})
        return Started(url, expires_at)

    async def _discover(self, http: httpx2.AsyncClient, url: str) -> _Discovered:
        """The authorization server of the MCP server at `url`, as the MCP authorization spec finds it."""
        # An unauthenticated MCP request: a protected server answers 401, naming its metadata.
        probe = await http.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": LATEST_PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": CLIENT_NAME, "version": "1"},
                },
            },
            headers={
                "Accept": "application/json, text/event-stream",
                MCP_PROTOCOL_VERSION_HEADER: LATEST_PROTOCOL_VERSION,
            },
        )
        await probe.aclose()
        challenged = probe.status_code in (401, 403)
        www_url = extract_resource_metadata_from_www_auth(probe) if challenged else None
        www_scope = extract_scope_from_www_auth(probe) if challenged else None
        canonical = resource_url_from_server_url(url)
        prm = None
        for candidate in build_protected_resource_metadata_discovery_urls(www_url, url):
            prm = await handle_protected_resource_response(await http.send(create_oauth_metadata_request(candidate)))
            if prm is not None:
                break
        resource = canonical
        if prm is not None and prm.resource:
            if not check_resource_allowed(requested_resource=canonical, configured_resource=str(prm.resource)):
                raise FailedPrecondition(
                    f"the server's protected resource metadata names {prm.resource}, not {canonical}"
                )
            resource = str(prm.resource)
        auth_server = str(prm.authorization_servers[0]) if prm is not None else None
        expected_issuer = auth_server or _origin(url)
        metadata: OAuthMetadata | None = None
        for candidate in build_oauth_authorization_server_metadata_discovery_urls(auth_server, url):
            ok, found = await handle_auth_metadata_response(await http.send(create_oauth_metadata_request(candidate)))
            if not ok:
                break
            if found is not None:
                if not issuers_match(str(found.issuer), expected_issuer):
                    raise FailedPrecondition(
                        f"the authorization server's metadata names issuer {found.issuer}, not {expected_issuer}"
                    )
                metadata = found
                break
        if metadata is None:
            raise FailedPrecondition(f"no authorization server metadata found for {expected_issuer}")
        if metadata.registration_endpoint is None:
            raise FailedPrecondition("its authorization server does not offer dynamic client registration")
        # The MCP spec: a client must refuse to go on without S256 offered.
        if "S256" not in (metadata.code_challenge_methods_supported or []):
            raise FailedPrecondition("its authorization server does not offer PKCE with S256")
        scope = get_client_metadata_scopes(www_scope, prm, metadata, GRANT_TYPES)
        return _Discovered(metadata, resource, scope)

    async def _client(
        self, http: httpx2.AsyncClient, server_id: str, discovered: _Discovered, redirect_uri: str
    ) -> OAuthClientInformationFull:
        """The client registered with the authorization server: the one kept, or a new registration
        when none is kept, it belongs to another issuer, or it does not name this redirect URI."""
        storage = self.storage(server_id)
        issuer = str(discovered.metadata.issuer)
        kept = await storage.get_client_info()
        if (
            kept is not None
            and (kept.issuer is None or issuers_match(kept.issuer, issuer))
            and redirect_uri in [str(uri) for uri in kept.redirect_uris or []]
        ):
            return kept
        wanted = OAuthClientMetadata(
            client_name=CLIENT_NAME,
            redirect_uris=[AnyUrl(redirect_uri)],
            grant_types=GRANT_TYPES,
            response_types=["code"],
            scope=discovered.scope,
        )
        request = create_client_registration_request(discovered.metadata, wanted, _origin(issuer))
        client = await handle_registration_response(await http.send(request))
        check_registration_usable(client)
        client.issuer = issuer
        await storage.set_client_info(client)
        # Tokens held, if any, belonged to the old client.
        with wrap_db_errors():
            await self.pool.execute(QUERIES["clear_oauth_tokens"], server_id)
        await storage.drop_tokens()
        logger.info("MCP OAuth client registered", extra={"server_id": server_id, "issuer": issuer})
        return client

    async def complete(self, state: str, code: str, error: str, error_description: str, iss: str) -> str:
        """Exchange the code the user's browser brought back; the server's id. InvalidArgument for a
        state this process did not issue, one used already or expired (nothing is stored then)."""
        if not state or len(state) > MAX_STATE_CHARS:
            raise InvalidArgument("state is missing or not one this server issued")
        with wrap_db_errors():
            taken = await self.pool.fetchrow(QUERIES["take_oauth_start"], _sha256(state))
        if taken is None:
            raise InvalidArgument("state is not one this server issued, or it was used already")
        if not taken["valid"]:
            raise InvalidArgument("the authorization took too long: its state expired; start it again")
        if error:
            described = f": {error_description}" if error_description else ""
            raise InvalidArgument(_bounded(f"the authorization server refused: {error}{described}"))
        if not code or len(code) > MAX_CODE_CHARS:
            raise InvalidArgument("code is missing or too long")
        server = await self._server(taken["server_id"])
        discovered = server.discovered
        if discovered is None:
            raise FailedPrecondition(f"MCP server {server.name} changed meanwhile: start again")
        try:
            validate_authorization_response_iss(iss or None, discovered.metadata)
        except OAuthFlowError as exc:
            raise InvalidArgument(_bounded(str(exc))) from None
        storage = self.storage(server.id)
        client = await storage.get_client_info()
        if client is None:
            raise FailedPrecondition(f"MCP server {server.name} has no registered client: start again")
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": taken["redirect_uri"],
            "client_id": client.client_id,
            "code_verifier": taken["code_verifier"],
            "resource": discovered.resource,
        }
        try:
            async with self._http() as http:
                response = await self._token_request(http, server, client, data)
                if response.status_code not in (200, 201):
                    raise InvalidArgument(f"the token exchange was refused ({await _error_of(response)})")
                tokens = await handle_token_response_scopes(response)
        except OAuthTokenError as exc:
            raise Unavailable(f"MCP server {server.name}: {_bounded(str(exc))}") from None
        except httpx2.HTTPError as exc:
            raise Unavailable(f"MCP server {server.name}: its token endpoint could not be reached: {exc}") from None
        if tokens.scope is None:
            tokens.scope = discovered.scope
        await self._keep(server.id, tokens)
        logger.info("MCP OAuth server connected", extra={"server": server.name})
        return server.id

    async def _token_request(
        self, http: httpx2.AsyncClient, server: _OAuthServer, client: OAuthClientInformationFull, data: dict[str, str]
    ) -> httpx2.Response:
        assert server.discovered is not None
        context = OAuthContext(
            server_url=server.url,
            client_metadata=OAuthClientMetadata(redirect_uris=None),
            storage=self.storage(server.id),
            redirect_handler=None,
            callback_handler=None,
            client_info=client,
        )
        # The client authenticates as it registered (client_secret_basic, _post or none).
        body, headers = context.prepare_token_auth(data, {"Content-Type": "application/x-www-form-urlencoded"})
        return await http.post(str(server.discovered.metadata.token_endpoint), data=body, headers=headers)

    async def _keep(self, server_id: str, tokens: OAuthToken, conn: Any = None) -> datetime | None:
        expires_at = datetime.now(UTC) + timedelta(seconds=tokens.expires_in) if tokens.expires_in else None
        # The secret first: a row that says connected always has tokens behind it.
        await self.storage(server_id).set_tokens(tokens)
        with wrap_db_errors():
            await (conn or self.pool).execute(QUERIES["set_oauth_tokens"], server_id, expires_at)
        return expires_at

    # --- using: the access token of a connection -----------------------------------------------------

    async def access_token(self, server_id: str, *, rejected: str = "") -> HeldToken:
        """The server's access token, refreshed when it is about to expire or `rejected` (a 401).
        ReconnectNeeded when there is none or the authorization server refused the refresh;
        Unavailable when the authorization server could not be asked."""
        server = await self._server(server_id)
        tokens = await self.storage(server_id).get_tokens() if server.connected else None
        if not server.connected or tokens is None:
            raise ReconnectNeeded.of(server.name, "it is not connected")
        held = HeldToken(tokens.access_token, _refresh_at(tokens, server.expires_at))
        if not held.due() and tokens.access_token != rejected:
            return held
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                await conn.execute(QUERIES["lock_oauth_refresh"], server_id)
            # Another process may have refreshed while this one waited for the lock.
            server = await self._server(server_id, conn)
            tokens = await self.storage(server_id).get_tokens() if server.connected else None
            if not server.connected or tokens is None:
                raise ReconnectNeeded.of(server.name, "it is not connected")
            held = HeldToken(tokens.access_token, _refresh_at(tokens, server.expires_at))
            if not held.due() and tokens.access_token != rejected:
                return held
            return await self._refresh(conn, server, tokens)

    async def _refresh(self, conn: Any, server: _OAuthServer, tokens: OAuthToken) -> HeldToken:
        storage = self.storage(server.id)
        client = await storage.get_client_info()
        if not tokens.refresh_token or client is None or server.discovered is None:
            await self._refused(server, "the access token expired and no refresh token was issued")
        assert tokens.refresh_token is not None and client is not None and server.discovered is not None
        data = {
            "grant_type": "refresh_token",
            "refresh_token": tokens.refresh_token,
            "client_id": client.client_id,
            "resource": server.discovered.resource,
        }
        try:
            async with self._http() as http:
                response = await self._token_request(http, server, client, data)
                if response.status_code in (400, 401):
                    await self._refused(server, f"the refresh was refused ({await _error_of(response)})")
                if response.status_code != 200:
                    raise Unavailable(
                        f"MCP server {server.name}: its authorization server did not refresh the token "
                        f"({await _error_of(response)})"
                    )
                await response.aread()
                fresh = OAuthToken.model_validate_json(response.content)
        except ValidationError:
            raise Unavailable(f"MCP server {server.name}: its authorization server answered no token") from None
        except httpx2.HTTPError as exc:
            raise Unavailable(f"MCP server {server.name}: its token endpoint could not be reached: {exc}") from None
        # RFC 6749 6: an answer without a refresh token or a scope keeps the ones held.
        if fresh.refresh_token is None:
            fresh.refresh_token = tokens.refresh_token
        if fresh.scope is None:
            fresh.scope = tokens.scope
        expires_at = await self._keep(server.id, fresh, conn)
        logger.info("MCP OAuth token refreshed", extra={"server": server.name})
        return HeldToken(fresh.access_token, _refresh_at(fresh, expires_at))

    async def _refused(self, server: _OAuthServer, reason: str) -> NoReturn:
        """The tokens are of no more use: dropped, and the server marked for connecting again."""
        await self.storage(server.id).drop_tokens()
        with wrap_db_errors():
            # Not in the refresh's transaction (`conn`), which this exception rolls back.
            await self.pool.execute(QUERIES["set_oauth_refused"], server.id, _bounded(reason))
        logger.warning("MCP OAuth server needs reconnecting", extra={"server": server.name, "reason": reason})
        raise ReconnectNeeded.of(server.name, reason)


class OAuthBearer(httpx2.Auth):
    """A connection's `Authorization: Bearer`, the token refreshed before it expires or on a 401."""

    def __init__(self, keeper: OAuthKeeper, server_id: str, held: HeldToken) -> None:
        self.keeper = keeper
        self.server_id = server_id
        self.held = held

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.held.due():
            self.held = await self.keeper.access_token(self.server_id)
        request.headers["Authorization"] = f"Bearer {self.held.access_token}"
        response = yield request
        if response.status_code == 401:
            self.held = await self.keeper.access_token(self.server_id, rejected=self.held.access_token)
            request.headers["Authorization"] = f"Bearer {self.held.access_token}"
            yield request
