package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the /v1/ API (openapi.json): every
// route, parameter, status code and error shape. The handler's tests
// validate each request and answer they make against it
// (TestAPI_OpenAPIDocument and the package's one test setup).
//
//go:embed openapi.json
var openAPI []byte

// pathOpenAPI is where the handler serves the document, without a key.
const pathOpenAPI = "/v1/openapi.json"

// OpenAPI returns the OpenAPI 3.1 document of the /v1/ API, as GET
// /v1/openapi.json serves it: a copy, the caller's to keep.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// openapi is GET /v1/openapi.json: no key needed (the document is
// public: it names no job, key or caller).
func (h *Handler) openapi(w http.ResponseWriter, r *http.Request) {
	if _, ok := queryOf(w, r); !ok {
		return
	}
	setJSONHeaders(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
}
