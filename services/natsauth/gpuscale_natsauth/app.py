"""The nats-auth I/O shell: auth callout requests in, Kubernetes TokenReviews, signed answers out."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from kubernetes_asyncio.client import ApiClient
from nats.aio.msg import Msg
from prometheus_client import Counter, Gauge, Histogram

from gpuscale.kube import KubeError, NotFound, new_api_client, request_json
from gpuscale.logging import OncePerKey, get_logger
from gpuscale.natsio import NATS, connect, drain, flush, is_connected
from gpuscale.runtime import ServiceContext, run

from .core import decide
from .core.decide import Grant, Identity, Policy, Refusal, Review
from .core.natsjwt import (
    AuthRequest,
    JwtError,
    Signer,
    encode,
    parse_authorization_request,
    response_claims,
    user_claims,
)
from .core.restraint import Admitted, ApiBackoff, ReviewMemory, TokenBucket, token_key
from .settings import NatsAuthSettings

SERVICE: Final = "nats-auth"
CALLOUT_SUBJECT: Final = "$SYS.REQ.USER.AUTH"
QUEUE_GROUP: Final = "gpuscale-nats-auth"
TOKEN_REVIEWS_PATH: Final = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - an API path
# Kubernetes calls get what is left of the server's deadline, within these bounds.
KUBE_TIMEOUT_MAX_S: Final = 5.0
KUBE_TIMEOUT_MIN_S: Final = 0.5
_LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


class NatsAuthMetrics:
    def __init__(self, ctx: ServiceContext) -> None:
        registry = ctx.metrics.registry
        self.authorized = Counter(
            "gpuscale_nats_auth_authorized_total",
            "Collector connections given a NATS user for their own node",
            registry=registry,
        )
        self.refused = Counter(
            "gpuscale_nats_auth_refused_total",
            "Connections refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.seconds = Histogram(
            "gpuscale_nats_auth_seconds",
            "Time from an auth callout request to its answer",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "gpuscale_nats_auth_in_flight", "Requests being checked now", registry=registry
        )
        self.reviews = Counter(
            "gpuscale_nats_auth_token_reviews_total",
            "TokenReviews asked of the Kubernetes API (at most --review-rate a second)",
            registry=registry,
        )
        self.remembered = Counter(
            "gpuscale_nats_auth_remembered_total",
            "Logins answered from a remembered review, by outcome",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("granted", "refused"):
            self.remembered.labels(outcome=outcome)
        for reason in decide.REASONS:  # every series exists from the start, at 0
            self.refused.labels(reason=reason)


def _seed_file(settings: NatsAuthSettings) -> Path:
    if settings.issuer_seed_file is None:
        raise ValueError(
            "--issuer-seed-file (or GPUSCALE_NATS_AUTH_ISSUER_SEED_FILE) is required: the account "
            "nkey seed whose public key is nats-server's auth_callout.issuer"
        )
    return settings.issuer_seed_file


def read_issuer(path: Path) -> Signer:
    """The issuer account's signer from its seed file; ValueError (never the seed) if unusable."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    try:
        return Signer.from_seed(text)
    except ValueError as e:
        raise ValueError(f"{path} does not hold an account nkey seed (SA...): {e}") from None


class Authorizer:
    """Answers auth callout requests; one task per request, bounded."""

    def __init__(self, ctx: ServiceContext, issuer: Signer, api: ApiClient) -> None:
        s: NatsAuthSettings = ctx.settings
        self.ctx = ctx
        self.issuer = issuer
        self.api = api
        self.policy = Policy(
            namespace=s.collector_namespace,
            service_account=s.collector_service_account,
            audience=s.audience,
            account=s.nats_account,
            max_ttl_s=int(s.max_user_ttl),
        )
        self.metrics = NatsAuthMetrics(ctx)
        self.nc: NATS | None = None
        self.subscribed = False
        self.log = get_logger(service=SERVICE)
        self._slots = asyncio.Semaphore(s.max_concurrent)
        self.memory = ReviewMemory(refusal_ttl_s=s.remember_refusals, grant_ttl_s=s.remember_grants)
        self.bucket = TokenBucket(s.review_rate, s.review_burst)
        self.backoff = ApiBackoff()
        self._tasks: set[asyncio.Task[None]] = set()
        self._once = OncePerKey()

    # --- NATS -------------------------------------------------------------------

    async def on_request(self, msg: Msg) -> None:
        task = asyncio.create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg: Msg) -> None:
        started = time.monotonic()
        self.metrics.in_flight.inc()
        try:
            payload = await self.authorize(msg.data, int(time.time()))
            if msg.reply:
                with contextlib.suppress(Exception):  # the server gave up on it (timeout): nothing to do
                    await msg.respond(payload)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.seconds.observe(time.monotonic() - started)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- one request --------------------------------------------------------------

    async def authorize(self, data: bytes, now: int) -> bytes:
        """The answer to one request: a signed response, or empty (the server refuses) when
        the request itself is not one we can answer."""
        try:
            request = parse_authorization_request(
                data.decode("utf-8", errors="replace").strip(), issuer=self.issuer.public_key, now=now
            )
        except JwtError as e:
            self._refused(Refusal(decide.BAD_REQUEST, f"{e.reason}: {e.detail}"), None)
            return b""
        outcome = await self._decide(request, now)
        if isinstance(outcome, Refusal):
            self._refused(outcome, request)
            claims = response_claims(request, error=f"{outcome.reason}: {outcome.detail}"[:500])
            return encode(claims, self.issuer, now).encode()
        user = user_claims(
            user_nkey=request.user_nkey,
            account=self.policy.account,
            name=outcome.name,
            permissions=outcome.permissions,
            expires=outcome.expires,
        )
        user_jwt = encode(user, self.issuer, now)
        self.metrics.authorized.inc()
        self.log.info(
            "collector_authorized",
            node=outcome.node,
            user=outcome.name,
            client_host=request.client_host,
            server=request.server_name,
            expires_in_s=outcome.expires - now,
        )
        return encode(response_claims(request, user_jwt=user_jwt), self.issuer, now).encode()

    async def _decide(self, request: AuthRequest, now: int) -> Grant | Refusal:
        token = request.auth_token
        # Free checks first: a made-up token costs no review and no room in the memory.
        early = decide.check_token(token) or decide.check_shape(token, self.policy, now)
        if early is not None:
            return early
        key, expiry = token_key(token), decide.token_expiry(token)
        remembered = self.memory.recall(key, time.monotonic())
        if remembered is not None:
            self.metrics.remembered.labels(
                outcome="refused" if isinstance(remembered, Refusal) else "granted"
            ).inc()
        if remembered is None:
            closed_for = self.backoff.closed_for(time.monotonic())
            if closed_for > 0:
                return Refusal(
                    decide.REVIEW_FAILED,
                    f"the API server failed a review: asking it again in {closed_for:.1f} s",
                )
            if not self.bucket.take(time.monotonic()):
                return Refusal(
                    decide.RATE_LIMITED,
                    f"more logins to review than --review-rate {self.bucket.rate_per_s:g}/s; "
                    f"next review in {self.bucket.next_in():.1f} s",
                )
            remembered = await self._review(request, token, now)
            valid_for_s = float(expiry - now) if expiry is not None else 0.0
            self.memory.remember(key, remembered, time.monotonic(), valid_for_s=valid_for_s)
        if isinstance(remembered, Refusal):
            return remembered
        return decide.grant(remembered.node, remembered.pod, expiry, now, self.policy)

    async def _review(self, request: AuthRequest, token: str, now: int) -> Admitted | Refusal:
        timeout_s = self._timeout(request, now)
        async with self._slots:  # only reviews wait for a slot: refusals above never queue
            if request.expires and time.time() >= request.expires:
                return Refusal(decide.REVIEW_FAILED, "the server's deadline passed while waiting for a slot")
            self.metrics.reviews.inc()
            try:
                answer = await request_json(
                    self.api,
                    "POST",
                    TOKEN_REVIEWS_PATH,
                    decide.token_review(token, self.policy),
                    timeout_s=timeout_s,
                )
            except KubeError as e:
                self.backoff.failed(time.monotonic())
                return Refusal(
                    decide.REVIEW_FAILED, f"TokenReview failed: {type(e).__name__}: {str(e)[:200]}"
                )
            self.backoff.succeeded()
            identity = decide.identify(Review.from_status(answer.get("status")), self.policy)
            if isinstance(identity, Refusal):
                return identity
            node: str | Refusal
            if identity.node is not None:
                node = identity.node
            else:
                node = await self._node_of_pod(identity, timeout_s)
        if isinstance(node, Refusal):
            return node
        return Admitted(node, identity.pod)

    async def _node_of_pod(self, identity: Identity, timeout_s: float) -> str | Refusal:
        path = f"/api/v1/namespaces/{quote(identity.namespace, safe='')}/pods/{quote(identity.pod, safe='')}"
        pod: dict[str, Any] | None
        try:
            pod = await request_json(self.api, "GET", path, timeout_s=timeout_s)
        except NotFound:
            pod = None
        except KubeError as e:
            self.backoff.failed(time.monotonic())
            return Refusal(
                decide.REVIEW_FAILED, f"reading the pod failed: {type(e).__name__}: {str(e)[:200]}"
            )
        return decide.node_from_pod(identity, pod, self.policy)

    @staticmethod
    def _timeout(request: AuthRequest, now: int) -> float:
        left = float(request.expires - now) if request.expires else KUBE_TIMEOUT_MAX_S
        return max(KUBE_TIMEOUT_MIN_S, min(KUBE_TIMEOUT_MAX_S, left))

    def _refused(self, refusal: Refusal, request: AuthRequest | None) -> None:
        self.metrics.refused.labels(reason=refusal.reason).inc()
        if self._once.first("refused", refusal.reason):
            self.log.warning(
                "connection_refused",
                reason=refusal.reason,
                detail=refusal.detail,
                client_host=request.client_host if request else "",
                client_name=request.client_name if request else "",
                note="logged once per reason; see gpuscale_nats_auth_refused_total",
            )


# --- the service ---------------------------------------------------------------


async def serve(ctx: ServiceContext) -> None:
    s: NatsAuthSettings = ctx.settings
    issuer = read_issuer(_seed_file(s))
    api = await new_api_client(s.kubeconfig)
    authorizer = Authorizer(ctx, issuer, api)
    ctx.http.add_readiness(
        "nats", lambda: (authorizer.subscribed and is_connected(authorizer.nc)[0], _state(authorizer))
    )
    log = get_logger(service=SERVICE)
    try:
        try:
            authorizer.nc = await connect(
                s.nats_url,
                ctx.metrics,
                name="gpuscale-nats-auth",
                creds=str(s.nats_creds) if s.nats_creds else None,
                tls_ca=str(s.nats_tls_ca) if s.nats_tls_ca else None,
                reconnect_wait_s=0.5,
                stop=ctx.stop,
                on_closed=ctx.reopen,
            )
        except Exception:  # noqa: BLE001 - connect only gives up when we are stopping
            return
        await authorizer.nc.subscribe(CALLOUT_SUBJECT, queue=QUEUE_GROUP, cb=authorizer.on_request)
        await flush(authorizer.nc, 10.0)  # the server knows the subscription before we serve
        authorizer.subscribed = True
        log.info(
            "auth_callout_serving",
            issuer=issuer.public_key,
            audience=s.audience,
            collector=authorizer.policy.username,
            account=s.nats_account,
        )
        await ctx.stop.wait()
    finally:
        authorizer.subscribed = False
        await drain(authorizer.nc)
        await authorizer.close()
        await api.close()


def _state(authorizer: Authorizer) -> str:
    if not authorizer.subscribed:
        return "not subscribed yet"
    return is_connected(authorizer.nc)[1]


def check_startup(settings: NatsAuthSettings) -> str | None:
    """A fatal start-up problem in words (the CLI exits 2 with it), or None."""
    try:
        read_issuer(_seed_file(settings))
    except ValueError as e:
        return str(e)
    policy = Policy(
        settings.collector_namespace,
        settings.collector_service_account,
        settings.audience,
        settings.nats_account,
        int(settings.max_user_ttl),
    )
    problems = decide.policy_problems(policy)
    return "; ".join(problems) if problems else None


def main(settings: NatsAuthSettings) -> int:
    problem = check_startup(settings)
    if problem is not None:
        print(f"gpuscale nats-auth: {problem}", file=sys.stderr)
        return 2
    return run(SERVICE, settings, serve)
