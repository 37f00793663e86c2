"""kafkalens proxy: all I/O lives here (sockets, asyncio, files, HTTP)."""
