"""/api/autonomy: the evolution loop's signals and its append-only revisions, with ignore, retry and revert.

The autonomy settings (/api/settings/autonomy) gate what learning does: with evolution
disabled new signals are ignored instead of learned from, and runs compose no learned
overlay or skill; with skill creation disabled no learned skill is written or composed.
"""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Path, Query

from popagent.evolution.v1 import learning_pb2 as pb
from popagent_gateway.deps import EvolutionLearningStub
from popagent_gateway.dto.autonomy import (
    RevisionListOut,
    RevisionListQuery,
    RevisionOut,
    SignalListOut,
    SignalListQuery,
    SignalOut,
)
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/autonomy", tags=["autonomy"])

RecordId = Annotated[str, Path(min_length=1, max_length=64)]


def revision_out(r: pb.Revision) -> RevisionOut:
    return RevisionOut(
        id=r.id,
        target_kind=r.target_kind,  # type: ignore[arg-type]
        target_key=r.target_key,
        agent_id=r.agent_id,
        before=orjson.loads(r.before_json) if r.before_json else None,
        after=orjson.loads(r.after_json) if r.after_json else None,
        strategy=r.strategy,
        signal_ids=list(r.signal_ids),
        trace_ids=list(r.trace_ids),
        reverts_revision_id=r.reverts_revision_id or None,
        reverted_by_id=r.reverted_by_id or None,
        created_at=r.created_at,
    )


@router.get("/signals", response_model=SignalListOut)
async def list_signals(evolution: EvolutionLearningStub, query: Annotated[SignalListQuery, Query()]) -> SignalListOut:
    """Recent signals, newest first (at most 200), optionally by status and agent."""
    response = await evolution.ListEvolutionSignals(
        pb.ListEvolutionSignalsRequest(status=query.status or "", agent_id=query.agent_id or "", limit=query.limit)
    )
    return SignalListOut(signals=[from_message(SignalOut, s) for s in response.signals])


@router.post("/signals/{signal_id}/ignore", response_model=SignalOut)
async def ignore_signal(signal_id: RecordId, evolution: EvolutionLearningStub) -> SignalOut:
    """Never learn from this signal: pending or dead-letter signals only (409 otherwise)."""
    return from_message(SignalOut, await evolution.IgnoreSignal(pb.SignalRequest(id=signal_id)))


@router.post("/signals/{signal_id}/retry", response_model=SignalOut)
async def retry_signal(signal_id: RecordId, evolution: EvolutionLearningStub) -> SignalOut:
    """A dead-letter signal back to pending, from attempt zero (409 for any other status)."""
    return from_message(SignalOut, await evolution.RetrySignal(pb.SignalRequest(id=signal_id)))


@router.get("/revisions", response_model=RevisionListOut)
async def list_revisions(
    evolution: EvolutionLearningStub, query: Annotated[RevisionListQuery, Query()]
) -> RevisionListOut:
    """Learned changes, newest first (at most 200): target, before and after, strategy, cited signals."""
    response = await evolution.ListRevisions(pb.ListRevisionsRequest(agent_id=query.agent_id or "", limit=query.limit))
    return RevisionListOut(revisions=[revision_out(r) for r in response.revisions])


@router.post("/revisions/{revision_id}/revert", response_model=RevisionOut)
async def revert_revision(revision_id: RecordId, evolution: EvolutionLearningStub) -> RevisionOut:
    """Append the compensating revision; 409 with the reason when the revision is not the target's latest,
    the target changed since, a user adopted it, or it was already reverted."""
    return revision_out(await evolution.RevertRevision(pb.RevertRevisionRequest(id=revision_id)))
