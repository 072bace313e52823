"""POST /v1/check over keep-alive connections, a fixed number each: the
load bench/http_instructions.sh counts the server's instructions under.

    keepalive_posts.py PORT POLICY KEYS REQUESTS_PER_CONNECTION CONNECTIONS

Prints the requests sent. Keys cycle through k0..k{KEYS-1}.
"""
import http.client
import sys
import threading

port, policy, keys = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
per_connection, connections = int(sys.argv[4]), int(sys.argv[5])


def run(index):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for n in range(per_connection):
        key = (index * per_connection + n) % keys
        body = '{"key":"k%d","policy":"%s"}' % (key, policy)
        connection.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
        connection.getresponse().read()


threads = [threading.Thread(target=run, args=(index,)) for index in range(connections)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(per_connection * connections)
