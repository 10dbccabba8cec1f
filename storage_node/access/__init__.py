"""Who may do what: users, their credentials and the ACL rules that allow them operations on
topics and groups. ``document`` is the one model of it, shared by the nodes (which enforce
it), the CLI (which edits it for clusters outside Kubernetes) and the operator (which writes
it from ``MessageStoreUser`` resources)."""
