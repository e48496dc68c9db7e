"""The sequencer's receipts reach the event loop one wake-up per batch (server._Receipts)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest

from runner.service.log.sequencer import Outcome, Receipt
from runner.service.log.storage import StorageUnavailableError
from runner.service.server import _Receipts


def test_a_batch_of_receipts_is_handed_over_in_one_wake_up() -> None:
    async def scenario() -> tuple[list[Receipt | BaseException], int]:
        loop = asyncio.get_running_loop()
        wake_ups = 0
        original = loop.call_soon_threadsafe

        def counting(*args: object) -> asyncio.Handle:
            nonlocal wake_ups
            wake_ups += 1
            return original(*args)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]
        receipts = _Receipts(loop)
        submitted: list[Future[Receipt]] = [Future() for _ in range(3)]
        waiting = [receipts.watch(future) for future in submitted]
        error = StorageUnavailableError("the disk went away")

        # One batch, resolved together (here without yielding to the loop in between, so the
        # count is exact; the sequencer thread does the same between two of the loop's turns).
        submitted[0].set_result(Receipt(Outcome.CREATED, 0))
        submitted[1].set_exception(error)
        submitted[2].set_result(Receipt(Outcome.PRESENT, 7))
        outcomes = await asyncio.gather(*waiting, return_exceptions=True)
        return outcomes, wake_ups

    outcomes, wake_ups = asyncio.run(scenario())
    assert outcomes[0] == Receipt(Outcome.CREATED, 0)
    assert isinstance(outcomes[1], StorageUnavailableError)
    assert str(outcomes[1]) == "the disk went away"
    assert outcomes[2] == Receipt(Outcome.PRESENT, 7)
    assert wake_ups == 1


def test_a_request_no_longer_waiting_is_skipped_and_the_others_answered() -> None:
    async def scenario() -> Receipt:
        receipts = _Receipts(asyncio.get_running_loop())
        first: Future[Receipt] = Future()
        second: Future[Receipt] = Future()
        abandoned = receipts.watch(first)
        answered = receipts.watch(second)
        abandoned.cancel()
        first.set_result(Receipt(Outcome.CREATED, 0))
        second.set_result(Receipt(Outcome.CREATED, 1))
        result = await answered
        assert abandoned.cancelled()
        return result

    assert asyncio.run(scenario()) == Receipt(Outcome.CREATED, 1)


def test_a_receipt_for_a_future_already_done_is_not_set_twice() -> None:
    async def scenario() -> None:
        receipts = _Receipts(asyncio.get_running_loop())
        submitted: Future[Receipt] = Future()
        waiting = receipts.watch(submitted)
        waiting.set_result(Receipt(Outcome.PRESENT, 3))
        submitted.set_result(Receipt(Outcome.CREATED, 4))
        await asyncio.sleep(0)
        assert waiting.result() == Receipt(Outcome.PRESENT, 3)

    asyncio.run(scenario())


@pytest.mark.parametrize("count", [1, 5])
def test_receipts_arriving_in_separate_batches_each_wake_the_loop(count: int) -> None:
    async def scenario() -> list[Receipt]:
        receipts = _Receipts(asyncio.get_running_loop())
        answers = []
        for index in range(count):
            submitted: Future[Receipt] = Future()
            waiting = receipts.watch(submitted)
            await asyncio.to_thread(submitted.set_result, Receipt(Outcome.CREATED, index))
            answers.append(await waiting)
        return answers

    assert asyncio.run(scenario()) == [Receipt(Outcome.CREATED, i) for i in range(count)]
