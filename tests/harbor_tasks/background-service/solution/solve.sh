#!/bin/bash
# A web server left running in the background (Perl: it is in every Debian image).
mkdir -p /srv/site
echo served > /srv/site/answer.txt
nohup perl -MIO::Socket::INET -e '
    my $server = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 8080,
                                       Listen => 5, ReuseAddr => 1) or die "listen: $!";
    while (my $client = $server->accept) {
        # The whole request, up to its blank line: closing a socket with unread input
        # sends a reset, which can destroy the answer before the client reads it.
        while (my $line = <$client>) { last if $line =~ /^\r?\n$/; }
        open(my $file, "<", "/srv/site/answer.txt") or next;
        print $client "HTTP/1.0 200 OK\r\n\r\n", <$file>;
        close $client;
    }' > /tmp/server.log 2>&1 &
