"""The admission policy: an AdmissionReview in, a decision and its patch out (pure), the Pod's
recorded edits, the schemas, annotations, quantities and warnings; devices/, one module per vendor."""
