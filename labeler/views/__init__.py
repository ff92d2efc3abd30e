"""The labeler's views of a run: each rank against its own history (:mod:`.temporal`),
against its peers at the same step (:mod:`.peer`), and its run delay against its peers'
(:mod:`.starved`, the host peer view).
"""
