"""Captures: pcap/pcapng files read, TCP streams reassembled, and the observer driven from them (`kafkalens decode CAPTURE`)."""
