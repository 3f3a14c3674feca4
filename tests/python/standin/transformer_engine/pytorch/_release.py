"""Which TE release's behaviour the stand-in follows where releases differ (set by tests).
BEFORE_PR_3394: TE 2.19's stash pairing, before PR #3394 (TE 2.20): prepare_forward stashes for
recompute only in training mode, and a reentrant checkpoint entered without grad, or none of
whose inputs needs grad, still opens a recompute frame."""

BEFORE_PR_3394 = False
