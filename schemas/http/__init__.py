"""The HTTP contract both APIs keep (the resolver's and the product read API): bearer
tokens with a role per tenant and the dependencies that declare a route's role
(``auth``), the error body with its stable codes and the handlers that answer every
error with it (``errors``, ``exceptions``), and the bounded path parameters
(``params``).

It sits in ``schemas`` because ``producers`` and ``processors`` both serve HTTP and
may not import each other. It is the one part of ``schemas`` built on FastAPI; only
the HTTP processes import it.
"""
