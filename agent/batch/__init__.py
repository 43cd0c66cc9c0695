"""Batch comparisons: models x problems x samples through the agent loop, resumable, with
pass@k, fast_p, per-step curves and reports (``kloop batch``, ``kloop report``, ``kloop rejudge``).

- ``config``: the YAML config (``BatchConfig``, ``Mode``); ``episodes``: what runs and what it leaves
- ``store``: the batch folder, kill -9 safe; ``runner``: ``run_batch``
- ``episode``: one episode through ``agent.loop.Agent``; failures told apart (model vs infrastructure)
- ``executor_local`` / ``executor_ray``: where episodes run
- ``metrics``, ``leaderboard``, ``report``, ``report_html``, ``svg``: the numbers and how they are shown
- ``rejudge``: saved solutions judged again by the current harness
"""
