"""Scraping the routers' `/metrics` for the autoscaler: I/O, kept apart from its decisions
(autoscaling/scaler.py), and shared by its two loops, the operator's (kubernetes/autoscaler.py)
and the local backend's (local/scaler.py), which is why it sits below both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

SCRAPE_TIMEOUT_SECONDS = 5.0


async def fetch_metrics(urls: Mapping[str, str]) -> dict[str, str | None]:
    """GET each URL (aiohttp, concurrently, bounded by SCRAPE_TIMEOUT_SECONDS)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)

    async def one(session: aiohttp.ClientSession, url: str) -> str | None:
        try:
            async with session.get(url) as response:
                return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async with aiohttp.ClientSession(timeout=timeout) as session:
        texts = await asyncio.gather(*(one(session, url) for url in urls.values()))
    return dict(zip(urls, texts, strict=True))
