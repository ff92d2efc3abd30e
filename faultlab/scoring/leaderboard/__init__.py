"""``faultlab leaderboard``: every detector on every dataset, ranked by window MCC,
each row judged against the next by a paired bootstrap over runs.

One concern a module: :mod:`.compute` (score every detector on a dataset in one pass,
rank the rows), :mod:`.paired` (the paired bootstrap of two detectors on the same
runs), :mod:`.render` (Markdown and JSON), :mod:`.html` (the self-contained page with
each detector's CI per dataset), :mod:`.verify` (a submitted scores file re-scored
with its own settings) and :mod:`.cli` (the command). Nothing is imported here, so the
CLI registers the command without loading numpy or pandas.
"""
