"""The router process: engine.py (one thread, one epoll loop, Proton's C engine per connection)
constructs every feature and hands each the narrow interface it needs; attach.py decides who
takes a peer's link, interrouter.py keeps the inter-router links and the control plane's view,
drain.py leaves without losing a message.

May import every router package. Nothing outside this package imports engine.py but the
command (router/cli.py): features get the Router passed in and type it under TYPE_CHECKING.
"""
