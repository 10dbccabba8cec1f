"""Layer 3: the formats on the wire, shared by the node server and the client.

``batch_codec`` frames produce batches and read answers (``application/x-msgstore-batch``),
``append_answer`` the binary answer to an append, ``routing_table`` the routing document, and
``message_json`` the JSON shapes of messages and batches. Pure encoding and validation, no
I/O: the client imports these without loading the server or the store. Importing the package
loads none of them.
"""
