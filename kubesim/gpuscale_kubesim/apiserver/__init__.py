"""The API server: Kubernetes' REST surface over an object store, as strict as kube-apiserver.

- :mod:`.server`: the HTTP face (discovery, CRUD, list and watch, subresources, Tables,
  bearer tokens and RBAC, injected :mod:`.faults`);
- :mod:`.store`: the objects, with etcd's resourceVersion and the registry's rules;
- :mod:`.resources`: the kinds served, with their verbs, subresources and columns;
- :mod:`.checks`: what a write goes through before it is stored: decoding (:mod:`.typed`,
  :mod:`.structural`), validation (:mod:`.validation`, :mod:`.cel`, :mod:`.fielderrors`);
- :mod:`.authn`: ServiceAccount tokens (TokenRequest, TokenReview);
- :mod:`.patch`, :mod:`.selectors`, :mod:`.convert`, :mod:`.tables`, :mod:`.openapi`,
  :mod:`.openapi_proto`, :mod:`.errors`: the pieces of the wire format.

It knows nothing of the cluster that plays on it (:mod:`gpuscale_kubesim.cluster`).
"""
